package keycap

import "fmt"

// Family is the kind of pools a limit belongs to. Each front door counts in
// a family of its own, and a pool's identity includes its family, so no name
// chosen for one front door can reach another's pools: an HTTP limit named
// "conncap:chat" is not the chat app's connection pool, and a limit named
// "job:export" is not the export jobs' pool.
type Family uint8

const (
	// FamilyApp holds the limits an application builds with Spec.For, and
	// httplimit's: a limit of the same name and key shares their pools.
	FamilyApp Family = iota
	// FamilyJob holds joblimit's job pools.
	FamilyJob
	// FamilyConn holds conncap's connection pools.
	FamilyConn
	// FamilyPause holds pause's per-API pauses and paces.
	FamilyPause
	// familyInternal holds the engine's own records: marks, node
	// identities (store.Internal).
	familyInternal
)

var familyNames = [...]string{FamilyApp: "app", FamilyJob: "job", FamilyConn: "conn", FamilyPause: "pause", familyInternal: "internal"}

// String returns "app", "job", "conn" or "pause".
func (f Family) String() string {
	if int(f) < len(familyNames) {
		return familyNames[f]
	}
	return fmt.Sprintf("Family(%d)", uint8(f))
}

func (f Family) valid() bool { return f < familyInternal }
