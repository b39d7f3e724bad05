package keystate

// The two rules every decision here comes from; docs/state.md argues them.
//
// The restore rule: of two entries of a key, the one with the higher
// applied offset holds the key's state (a key's records run in offset
// order, so it has seen more of them); on equal offsets, the one with the
// larger fencing token (the later owner's, whose state the range went on
// with); on equal offsets and tokens, a tombstone over a value (an
// operator's deletion of the key's state: under one token a record makes
// one change, so no two changes are equal in both). The skip rule: a record at or below its key's applied offset has
// changed the state already and must not run again.

// Switch-offs for the model test, which must fail with any of them off
// (export_test.go turns them); never changed outside tests.
var (
	// skipApplied off: Seen is always false and a change at or below
	// the key's applied offset is accepted, so a re-run applies twice.
	skipApplied = true
	// fenceTieBreak off: on equal applied offsets the later entry in
	// changelog order wins, as plain compaction would pick.
	fenceTieBreak = true
	// repairLosers off: no repairs, so compaction can keep a stale
	// change that lost to the key's state.
	repairLosers = true
)

// supersedes reports whether entry e, read after the key's state cur,
// holds the key's state instead of it. An entry equal to cur in offset,
// token and kind is a copy (a repair) and changes nothing.
func supersedes(e, cur Entry) bool {
	if e.Applied != cur.Applied {
		return e.Applied > cur.Applied
	}
	if !fenceTieBreak {
		return true
	}
	if e.Fence != cur.Fence {
		return e.Fence > cur.Fence
	}
	return e.Deleted && !cur.Deleted
}

// deletes reports whether e is an operator's deletion of the key's state
// cur: a tombstone at cur's offset and token (statestore.DeleteKey).
func deletes(e, cur Entry) bool {
	return e.Deleted && !cur.Deleted && e.Applied == cur.Applied && e.Fence == cur.Fence
}
