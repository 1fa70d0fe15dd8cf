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
