package keycap

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// PoolID identifies a pool (a family, a limit name and a key) to a store.
// Its first four bytes are the name's Tag, shared by every pool of the name
// (so that an Inspector finds a limit's pools without reading anyone
// else's), and its other twelve are 96 bits of SHA-256 over the three, byte
// for byte. Stores never see the key in clear, any key fits any store's key
// limits, and, the hash being cryptographic, nobody can craft a key that
// shares another key's pool.
type PoolID [16]byte

// Tag is the first four bytes of the pools of one limit name (a family and a
// name): an FNV-1a hash of the two. Tags of different names may collide (1
// in 2³² for a pair): an Inspector then shows the other name's pools beside
// the asked one's, and nothing tells them apart without their keys.
type Tag [4]byte

// TagOf returns the tag of the pools of name in family f.
func TagOf(f Family, name string) Tag {
	h := uint32(2166136261)
	h = (h ^ uint32(f)) * 16777619
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return Tag{byte(h >> 24), byte(h >> 16), byte(h >> 8), byte(h)}
}

// Tag returns the pool's tag: the tag of its family and name.
func (p PoolID) Tag() Tag { return Tag(p[:4]) }

// String returns the tag in lower-case hex.
func (t Tag) String() string { return hex.EncodeToString(t[:]) }

// NewPoolID returns the identity of the pool (name, key) of FamilyApp: the
// pool of NewLimit(name, key, ...).
func NewPoolID(name, key string) PoolID { return PoolIDOf(FamilyApp, name, key) }

// PoolIDOf returns the identity of the pool (name, key) of family f. The
// family comes first and the name's length before the name, so ("ab", "c")
// and ("a", "bc") are different pools, and so are two families' pools of
// the same name and key.
func PoolIDOf(f Family, name, key string) PoolID {
	var n [1 + binary.MaxVarintLen64]byte
	n[0] = byte(f)
	prefix := n[:1+binary.PutUvarint(n[1:], uint64(len(name)))]
	var sum [sha256.Size]byte
	if total := len(prefix) + len(name) + len(key); total <= 256 {
		// The common case, hashed from the stack without an allocation.
		var buf [256]byte
		b := append(append(append(buf[:0], prefix...), name...), key...)
		sum = sha256.Sum256(b)
	} else {
		h := sha256.New()
		h.Write(prefix)
		h.Write([]byte(name))
		h.Write([]byte(key))
		h.Sum(sum[:0])
	}
	var id PoolID
	t := TagOf(f, name)
	copy(id[:4], t[:])
	copy(id[4:], sum[:12])
	return id
}

// String returns the identity in lower-case hex.
func (p PoolID) String() string { return hex.EncodeToString(p[:]) }

// Owner is the random token that names one lease inside its pool. Release and
// Renew must name it, so a holder whose lease expired cannot free or extend a
// slot that someone else took since.
type Owner [16]byte

// NewOwner returns a fresh random owner token.
func NewOwner() Owner {
	var o Owner
	binary.LittleEndian.PutUint64(o[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(o[8:], rand.Uint64())
	return o
}

// String returns the token in lower-case hex.
func (o Owner) String() string { return hex.EncodeToString(o[:]) }
