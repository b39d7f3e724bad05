package statestore

import (
	"slices"
	"sync"
	"time"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// A grant is one hash range of one partition as the member holds it under
// one fencing token, with the range's state. A record of the range under
// a token the member has no grant for (the range just taken over, split,
// merged, or taken back after another member held it) makes a new grant,
// which restores the range's state from the changelog before any of its
// records runs; the member's older grants that overlap it are dropped.
type grant struct {
	topic     string
	partition int32
	rng       ledger.HashRange
	token     int64

	ready chan struct{} // closed once restored, or failed (err)
	err   error         // set before ready is closed

	mu    sync.Mutex // guards table
	table *keystate.Table

	// calls counts the handler calls under this grant (grantOf adds
	// one, the caller's release takes it away), its restore and the
	// follower's passes; appends counts its changes on their way to the
	// changelog, which can outlive their call. A grant given up is
	// retired until both are done (Store.retireLocked), and a restore of
	// an overlapping range on this member waits for the retired grants
	// it overlaps, so that it reads every change this member made under
	// them. A call still running when its range is split (the member
	// keeping the parts under new tokens) writes its change after the
	// parts' next records began their restores; without the wait, a
	// key's next record read a state without it.
	calls   sync.WaitGroup
	appends sync.WaitGroup

	progress restoreProgress
	// from is the end offset the restore read to: the follower passes
	// the range the records from there on (follow.go).
	from int64
	// parts are the member's copies inside the range when the grant was
	// made (copies.go): the restore reads only the changelog's tail when
	// they hold all of it.
	parts []copyRange
	// through is the changelog offset the table holds every entry below,
	// and throughAt a time before which no entry from through on was
	// appended: what a copy of the table records. Guarded by mu.
	through   int64
	throughAt time.Time

	// given: the member gave the grant up (a failed restore or append, a
	// newer grant overlapping it, or its range gone: Track); spoiled: for
	// a failure (giveUp), so it is no copy to restore from; shadowed: the
	// least range holding the hashes of the keys whose later owner's
	// change the table saw, which its copies leave out (copies.go). All
	// guarded by the Store's mutex.
	given    bool
	spoiled  bool
	shadowed ledger.HashRange
}

// shadowLocked records that g's table saw later owners' changes of keys
// whose hashes r holds. The caller holds the Store's mutex.
func (g *grant) shadowLocked(r ledger.HashRange) { g.shadowed = spanning(g.shadowed, r) }

// spanning returns the least range that holds both r and o, of which
// either may be empty.
func spanning(r, o ledger.HashRange) ledger.HashRange {
	switch {
	case r.Empty():
		return o
	case o.Empty():
		return r
	}
	return ledger.HashRange{Lo: min(r.Lo, o.Lo), Hi: max(r.Hi, o.Hi)}
}

// hashAt is the range of hash h alone.
func hashAt(h uint32) ledger.HashRange { return ledger.HashRange{Lo: uint64(h), Hi: uint64(h) + 1} }

// copyable returns the parts of g's range a copy of its table holds: none
// if g is spoiled, else its range without the keys a later owner changed.
// The caller holds the Store's mutex.
func (g *grant) copyable() []ledger.HashRange {
	if g.spoiled {
		return nil
	}
	return g.rng.Minus(g.shadowed)
}

// partitionKey names a topic's partition.
type partitionKey struct {
	topic     string
	partition int32
}

// grants holds a member's grants by partition. It is guarded by the
// Store's mutex.
type grants map[partitionKey][]*grant

// find returns the grant of range r under token, if the member has it.
func (gs grants) find(pk partitionKey, r ledger.HashRange, token int64) *grant {
	for _, g := range gs[pk] {
		if g.rng == r && g.token == token && !g.given {
			return g
		}
	}
	return nil
}

// superseded reports whether a grant of the member that overlaps r has a
// token above token: a record dispatched under token belongs to a range
// this member held before and holds again under a newer grant, or lost.
func (gs grants) superseded(pk partitionKey, r ledger.HashRange, token int64) bool {
	for _, g := range gs[pk] {
		if g.token > token && !g.rng.Intersect(r).Empty() {
			return true
		}
	}
	return false
}

// replace adds g to the member's grants, and drops and returns those it
// overlaps.
func (gs grants) replace(g *grant) (dropped []*grant) {
	pk := partitionKey{g.topic, g.partition}
	kept := gs[pk][:0]
	for _, o := range gs[pk] {
		if !o.rng.Intersect(g.rng).Empty() {
			dropped = append(dropped, o)
		} else {
			kept = append(kept, o)
		}
	}
	gs[pk] = append(kept, g)
	return dropped
}

// remove takes g out of the member's grants.
func (gs grants) remove(g *grant) {
	pk := partitionKey{g.topic, g.partition}
	gs[pk] = slices.DeleteFunc(gs[pk], func(o *grant) bool { return o == g })
	if len(gs[pk]) == 0 {
		delete(gs, pk)
	}
}
