package redisstore

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/keycap/keycap"
)

// KEYCAP_LANES sets the lanes of one Redis and of each cluster node, to
// measure other counts.
func init() {
	if n, err := strconv.Atoi(os.Getenv("KEYCAP_LANES")); err == nil && n > 0 {
		lanes, clusterLanes = n, n
	}
}

// TestPoolNamesMatchKey checks the names the calls build in one buffer:
// the pool's key is Key's, its line's and channel's share its hash tag, and
// the owner follows, for a short prefix (in the buffer) and a long one (on
// the heap).
func TestPoolNamesMatchKey(t *testing.T) {
	for _, prefix := range []string{"", "app:", strings.Repeat("p", 64) + ":"} {
		s := &Store{prefix: prefix}
		pool := keycap.NewPoolID("names", prefix)
		owner := keycap.NewOwner()
		var n poolNames
		n.fill(prefix, pool, owner)
		tag := "{" + pool.String() + "}"
		want := []string{s.Key(pool), prefix + "keycap:line:" + tag, prefix + "keycap:lmeta:" + tag}
		if !slices.Equal(n.keys[:], want) || n.channel != prefix+"keycap:wake:"+tag || n.owner != string(owner[:]) {
			t.Errorf("prefix %q: built %q %q %x, want %q %q %x", prefix, n.keys, n.channel, n.owner, want, prefix+"keycap:wake:"+tag, owner[:])
		}
	}
}
