package store

import (
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"
)

// PoolOf returns the identity of the pool (name, key) of a family (a
// keycap.Family, or with the shadow bit 0x80). The family comes first and
// the name's length before the name, so ("ab", "c") and ("a", "bc") are
// different pools, and so are two families' pools of the same name and key.
// The hash is cryptographic, so nobody can craft a key that shares another
// key's pool.
func PoolOf(family byte, name, key string) PoolID {
	var n [1 + binary.MaxVarintLen64]byte
	n[0] = family
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
	t := TagOf(family, name)
	copy(id[:4], t[:])
	copy(id[4:], sum[:12])
	return id
}

// TagOf returns the tag of the pools of name in a family: an FNV-1a hash of
// the two.
func TagOf(family byte, name string) Tag {
	h := uint32(2166136261)
	h = (h ^ uint32(family)) * 16777619
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return Tag{byte(h >> 24), byte(h >> 16), byte(h >> 8), byte(h)}
}

// Internal is the family of keycap's own records (node identities, marks,
// parents, owners derived from a name), apart from every front door's.
// Shadow is the bit that marks the family of a shadow limit's pools, and of
// its parent's, apart from the enforced limit's.
const (
	Internal byte = 4
	Shadow   byte = 0x80
)

// NewOwner returns a fresh random owner token.
func NewOwner() Owner {
	var o Owner
	binary.LittleEndian.PutUint64(o[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(o[8:], rand.Uint64())
	return o
}

// NodeOf returns the ID of the node named name.
func NodeOf(name string) NodeID {
	p := PoolOf(Internal, "node", name)
	var n NodeID
	copy(n[:], p[4:12]) // after the tag, which every node's hash shares
	return n
}

// MemberOf returns the owner token of a node's member named name: the node's
// ID followed by eight bytes of name's hash. The same node and name always
// give the same token, so acquiring with it is idempotent.
func MemberOf(node NodeID, name string) Owner {
	p := PoolOf(Internal, "member", name)
	var o Owner
	copy(o[:8], node[:])
	copy(o[8:], p[4:12]) // after the tag, which every member's hash shares
	return o
}
