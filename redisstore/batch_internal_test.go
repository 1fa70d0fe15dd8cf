package redisstore

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/keycap/keycap"
)

// KEYCAP_LANES sets the lanes per node, to measure other counts.
func init() {
	if n, err := strconv.Atoi(os.Getenv("KEYCAP_LANES")); err == nil && n > 0 {
		lanes = n
	}
}

// TestPoolNamesMatchNames checks that the names the hot calls build in one
// buffer are the store's names, for a short prefix (in the buffer) and a
// long one (on the heap).
func TestPoolNamesMatchNames(t *testing.T) {
	for _, prefix := range []string{"", "app:", strings.Repeat("p", 64) + ":"} {
		s := &Store{prefix: prefix}
		pool := keycap.NewPoolID("names", prefix)
		owner := keycap.NewOwner()
		var n poolNames
		n.fill(prefix, pool, owner)
		keys, channel := s.names(pool)
		if !slices.Equal(n.keys[:], keys) || n.channel != channel || n.owner != string(owner[:]) {
			t.Errorf("prefix %q: built %q %q %x, want %q %q %x", prefix, n.keys, n.channel, n.owner, keys, channel, owner[:])
		}
	}
}
