package redisstore

import (
	"os"
	"strconv"
)

func init() {
	if n, err := strconv.Atoi(os.Getenv("KEYCAP_LANES")); err == nil && n > 0 {
		lanes = n
	}
}
