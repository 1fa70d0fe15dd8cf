package redisstore

import "github.com/keycap/keycap/store"

// The Redis keys and channels of the store, for its tests to look at.

func (s *Store) Key(pool store.PoolID) string                       { return s.key(pool) }
func (s *Store) LineKeys(pool store.PoolID) (line, meta string)     { return s.lineKeys(pool) }
func (s *Store) Channel(pool store.PoolID) string                   { return s.channel(pool) }
func (s *Store) OverrideKeys() (set, version string)                { return s.overrideNames() }
func (s *Store) MarkKey(id store.PoolID) string                     { return s.markKey(id) }
func (s *Store) PauseKey(id store.PoolID) string                    { return s.pauseKey(id) }
func (s *Store) RateKey(id store.PoolID) string                     { return s.rateKey(id) }
func (s *Store) ShareKeys(parent store.PoolID) (l, m, w, ln string) { return s.shareKeys(parent) }

// lineKeys returns the Redis keys of pool's wait line: the line (a sorted
// set of owner token → arrival number) and its meta (a hash of each
// ticket's expiry and claim window, the pool's max and the last arrival
// number). They share the pool's hash tag.
func (s *Store) lineKeys(pool store.PoolID) (line, meta string) {
	keys, _ := s.names(pool)
	return keys[1], keys[2]
}

// shareKeys returns the Redis keys of parent's pools (keycap.Parent): the
// leases of every key of the parent, the meta that counts them per key,
// the set of keys that have a line, and the prefix of each key's line
// (followed by the key's pool in hex; its tickets are that name with
// ":t"). They all share the parent's hash tag, so that one script decides
// for the parent and its keys on one Redis Cluster slot.
func (s *Store) shareKeys(parent store.PoolID) (leases, meta, waiting, lines string) {
	keys, lines, _ := s.shareNames(parent)
	return keys[0], keys[1], keys[2], lines
}

// UseScripts makes s run the line's scripts as scripts (EVALSHA), as on
// Redis before 7.
func (s *Store) UseScripts() { s.functions.turnOff() }

// Library is the name of the line's function library.
var Library = libraryName

// RunsFunctions reports whether s runs the line's scripts as functions.
func (s *Store) RunsFunctions() bool { return s.functions.on() }
