package redisstore

import (
	"context"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

var (
	//go:embed overrides.lua
	overridesLua    string
	overridesScript = redis.NewScript(overridesLua)
)

// overrideNames returns the Redis keys of the store's overrides
// (store.Overrides): a hash of pool (in hex) → override, each field
// "expiry|family|max|share|len(name)|" followed by the name and the key as
// they are (the expiry in Unix ms by Redis's clock, 0 for none), and the
// version of the set: moved on by every change to Redis's time in µs, or
// to one more than it was if that is later, so that a Redis that lost its
// data (or a replica that took over before a change reached it) does not
// hand out again a version that clients hold for other overrides. The two
// share the hash tag {o}: on a cluster, every override lives on one
// master.
func (s *Store) overrideNames() (set, version string) {
	set = s.prefix + "keycap:overrides:{o}"
	return set, set + ":v"
}

func (s *Store) overrideKeys() []string {
	set, version := s.overrideNames()
	return []string{set, version}
}

// SetOverride implements store.Store: one EVALSHA, which stores the
// override, expiring o.TTL from now by Redis's clock, and moves the
// version on.
func (s *Store) SetOverride(ctx context.Context, o store.Override) error {
	var ttl int64
	if o.TTL > 0 {
		ttl = ms(o.TTL)
	}
	v := fmt.Sprintf("%d|%d|%d|%d|%s%s", o.Family, o.Max, o.Share, len(o.Name), o.Name, o.Key)
	if err := overridesScript.Run(ctx, s.client, s.overrideKeys(), "set", o.Pool.String(), ttl, v).Err(); err != nil {
		s.failed(err)
		return fmt.Errorf("redisstore: set override: %w", err)
	}
	return nil
}

// DeleteOverride implements store.Store: one EVALSHA, which moves the
// version on only when there was an override to remove.
func (s *Store) DeleteOverride(ctx context.Context, pool store.PoolID) error {
	if err := overridesScript.Run(ctx, s.client, s.overrideKeys(), "del", pool.String()).Err(); err != nil {
		s.failed(err)
		return fmt.Errorf("redisstore: delete override: %w", err)
	}
	return nil
}

// Overrides implements store.Store: one EVALSHA, which reads only the
// version when it is still since, else every override with its time left
// by Redis's clock (dropping the expired ones, which leaves the version as
// it is).
func (s *Store) Overrides(ctx context.Context, since uint64) (uint64, []store.Override, error) {
	reply, err := overridesScript.Run(ctx, s.client, s.overrideKeys(), "get", strconv.FormatUint(since, 10)).Slice()
	if err != nil {
		s.failed(err)
		return 0, nil, fmt.Errorf("redisstore: overrides: %w", err)
	}
	bad := func(what any) error { return fmt.Errorf("redisstore: overrides: unexpected reply %q", what) }
	if len(reply) == 0 || (len(reply)-1)%3 != 0 {
		return 0, nil, bad(reply)
	}
	vs, _ := reply[0].(string)
	version, err := strconv.ParseUint(vs, 10, 64)
	if err != nil {
		return 0, nil, bad(reply[0])
	}
	if version == since {
		return since, nil, nil
	}
	var list []store.Override
	for i := 1; i < len(reply); i += 3 {
		field, _ := reply[i].(string)
		left, ok := reply[i+1].(int64)
		value, _ := reply[i+2].(string)
		o, err := decodeOverride(field, value)
		if !ok || err != nil {
			return 0, nil, bad(reply[i : i+3])
		}
		o.TTL = time.Duration(left) * time.Millisecond
		list = append(list, o)
	}
	return version, list, nil
}

// decodeOverride reads an override stored by SetOverride, its expiry
// stripped: "family|max|share|len(name)|" then the name and the key.
func decodeOverride(field, value string) (store.Override, error) {
	var o store.Override
	b, err := hex.DecodeString(field)
	if err != nil || len(b) != len(o.Pool) {
		return o, fmt.Errorf("bad pool %q", field)
	}
	copy(o.Pool[:], b)
	f := strings.SplitN(value, "|", 5)
	if len(f) != 5 {
		return o, fmt.Errorf("bad override %q", value)
	}
	family, err1 := strconv.ParseUint(f[0], 10, 8)
	maxSlots, err2 := strconv.Atoi(f[1])
	share, err3 := strconv.Atoi(f[2])
	n, err4 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || n < 0 || n > len(f[4]) {
		return o, fmt.Errorf("bad override %q", value)
	}
	o.Family, o.Max, o.Share = uint8(family), maxSlots, share
	o.Name, o.Key = f[4][:n], f[4][n:]
	return o, nil
}
