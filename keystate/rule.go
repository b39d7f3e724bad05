package keystate

// The two rules every decision here comes from; docs/state.md argues them.
//
// The restore rule: of two entries of a key, the one with the higher
// applied offset holds the key's state (a key's records run in offset
// order, so it has seen more of them); on equal offsets, the one with the
// larger fencing token (the later owner's, whose state the range went on
// with). The skip rule: a record at or below its key's applied offset has
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

// supersedes reports whether a change at (applied, fence), read after one
// at (curApplied, curFence), holds the key's state instead of it. An entry
// equal in both is a copy (a repair) and changes nothing.
func supersedes(applied, fence, curApplied, curFence int64) bool {
	if applied != curApplied {
		return applied > curApplied
	}
	if !fenceTieBreak {
		return true
	}
	return fence > curFence
}
