package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keycap/keycap/store"
)

// slotOf returns the Redis Cluster hash slot of every key of pool: the
// CRC16 of its hash tag, the pool's 32 hex digits.
func slotOf(pool store.PoolID) int {
	var tag [32]byte
	const hex = "0123456789abcdef"
	for i, b := range pool {
		tag[2*i], tag[2*i+1] = hex[b>>4], hex[b&15]
	}
	return int(crc16(tag[:]) % 16384)
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotRanges caches a cluster's slot ranges, to name the partition of a
// pool without a round trip. They change only when the cluster is resharded.
type slotRanges struct {
	ranges     atomic.Pointer[[]slotRange]
	refreshing atomic.Bool
	mu         sync.Mutex
	last       time.Time
}

type slotRange struct {
	start, end int
	name       string
}

// of returns the name of the range holding slot, "" while none is known.
func (r *slotRanges) of(slot int) string {
	p := r.ranges.Load()
	if p == nil {
		return ""
	}
	rs := *p
	i := sort.Search(len(rs), func(i int) bool { return rs[i].end >= slot })
	if i < len(rs) && rs[i].start <= slot {
		return rs[i].name
	}
	return ""
}

// refresh reads the ranges with one CLUSTER SLOTS, at most once a second.
func (r *slotRanges) refresh(c *redis.ClusterClient) {
	if !r.refreshing.CompareAndSwap(false, true) {
		return
	}
	defer r.refreshing.Store(false)
	r.mu.Lock()
	if time.Since(r.last) < time.Second {
		r.mu.Unlock()
		return
	}
	r.last = time.Now()
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = r.fetch(ctx, c)
}

// list returns the ranges, sorted by their first slot: the cached ones, or,
// while none are known, those of one CLUSTER SLOTS.
func (r *slotRanges) list(ctx context.Context, c *redis.ClusterClient) ([]slotRange, error) {
	if p := r.ranges.Load(); p != nil {
		return *p, nil
	}
	return r.fetch(ctx, c)
}

// fetch reads the ranges with one CLUSTER SLOTS and caches them.
func (r *slotRanges) fetch(ctx context.Context, c *redis.ClusterClient) ([]slotRange, error) {
	//lint:ignore SA1019 CLUSTER SHARDS needs Redis 7; redisstore supports 6.2 and later
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	if len(slots) == 0 {
		return nil, errors.New("CLUSTER SLOTS: no slot is served")
	}
	rs := make([]slotRange, len(slots))
	for i, s := range slots {
		rs[i] = slotRange{start: s.Start, end: s.End, name: fmt.Sprintf("slots %d-%d", s.Start, s.End)}
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	r.ranges.Store(&rs)
	return rs, nil
}

// slotKeys caches keyInSlot's keys, by slot.
var slotKeys sync.Map

// keyInSlot returns a key of the given slot, for MasterForKey: one of
// two bytes, as the CRC16 of two bytes takes every value once. It is never
// sent to Redis.
func keyInSlot(slot int) string {
	if k, ok := slotKeys.Load(slot); ok {
		return k.(string)
	}
	for x := range 1 << 16 {
		k := [2]byte{byte(x >> 8), byte(x)}
		if int(crc16(k[:])%16384) == slot {
			slotKeys.Store(slot, string(k[:]))
			return string(k[:])
		}
	}
	return "" // unreachable: every slot has four such keys
}
