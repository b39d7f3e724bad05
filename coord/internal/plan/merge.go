package plan

import (
	"fmt"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Merging fragments: adjacent ranges of one owner become one range.
//
// Ranges are split whenever hash space moves, and every record a member
// fetches is observed by each of its ranges in the partition, so without
// merging the per-record cost grows with every rebalance.
//
// A merge takes two steps, because the owner keeps in-memory state per range
// (progress since its last flush, records in flight). A member that sees two
// of its range records replaced by one covering both finds no old range that
// contains the new one, so it loads the new range from the ledger entry in
// etcd (consumer/table.go): its completions since the last flush would run
// again, and records in flight would be dispatched a second time. So:
//
//  1. The leader revokes each range of the run to its own owner (state
//     revoking, Target = Owner). The owner drains and releases it exactly as
//     in a handoff: it finishes what is in flight and writes its final
//     ledger entry with the release.
//  2. Once every range of the run is released (or its drain budget has
//     passed, as for any handoff), one transaction replaces the run by one
//     active range at the first range's key, with the ledger entries joined
//     (ledger.Entry.Concat), and deletes the other range records and ledger
//     keys. It is guarded by the revision of every record and every ledger
//     key of the run: a write by anyone since the snapshot fails it, and a
//     stale flush of a deleted or rewritten range key fails its own guard.
//
// A run is merged only while the assignor keeps all of it with its owner,
// and new merge drains start only once the group has been still for a while
// (settle.go) and in a partition with no other handoff under way; if the run
// breaks up meanwhile, the ranges left go back to the usual
// handoff rules (a revoke to self that is no longer a merge is taken back).

// mergeDrain reports whether r was revoked (or released) to its own owner:
// the first step of a merge.
func mergeDrain(r schema.RangeState) bool {
	return r.Record.State != schema.StateActive && r.Record.Target == r.Record.Owner
}

// mergeable reports whether r can be part of a merge run: a readable ledger
// entry, an owner that is alive and staying, which the desired assignment
// keeps all of r with, and no handoff to another member.
func (in Input) mergeable(r schema.RangeState, want []assign.Slice) bool {
	rec := r.Record
	m, alive := in.Snap.OwnerOf(r)
	if !alive || m.Leaving || r.EntryErr != nil {
		return false
	}
	if rec.State != schema.StateActive && !mergeDrain(r) {
		return false
	}
	pieces := split(rec.Range(), want)
	return len(pieces) == 1 && pieces[0].owner == rec.Owner && pieces[0].r == rec.Range()
}

// maxMergeRun is how many ranges one merge transaction joins: each brings two
// compares and two ops, within budget.
func (in Input) maxMergeRun() int { return max(2, in.budget()/2) }

// merges plans the merges of partition tp's ranges (have, in hash order):
// the changes, and the keys of the ranges they deal with, which the rest of
// the plan leaves alone this round.
func (in Input) merges(tp assign.TopicPartition, have []schema.RangeState, want []assign.Slice) ([]Change, map[string]bool) {
	// New merge drains start only when nothing else moves in the
	// partition: first the assignment settles, then its fragments merge.
	quiet := true
	for _, r := range have {
		if !in.mergeable(r, want) && !(r.Record.State == schema.StateActive && stays(r, want)) {
			quiet = false
			break
		}
	}
	var changes []Change
	claimed := make(map[string]bool)
	for i := 0; i < len(have); {
		j := i + 1
		if in.mergeable(have[i], want) {
			for j < len(have) && j-i < in.maxMergeRun() &&
				have[j].Record.Lo == have[j-1].Record.Hi &&
				have[j].Record.Owner == have[i].Record.Owner &&
				// Entries with state join with Concat; entries
				// without (each part starts at the committed
				// offset) join into one without. A mix cannot be
				// joined. (An owner's release writes its state, so
				// a run drained by a live owner has state.)
				have[j].Entry.Initialized() == have[i].Entry.Initialized() &&
				in.mergeable(have[j], want) {
				j++
			}
		}
		run := have[i:j]
		i = j
		if len(run) < 2 {
			continue
		}
		started, done := false, true
		for _, r := range run {
			if mergeDrain(r) {
				started = true
			}
			if !in.drained(r) {
				done = false
			}
		}
		switch {
		case done:
			changes = append(changes, in.merge(tp, run))
		case (quiet && in.Defrag) || started:
			for _, r := range run {
				if r.Record.State == schema.StateActive {
					c := in.replace(r, []next{{piece{r.Record.Range(), r.Record.Owner}, schema.StateRevoking, r.Record.Owner}}, false, "revoke to merge")
					c.Defrag = true
					changes = append(changes, c)
				}
			}
		default:
			continue // a handoff elsewhere in the partition: merge later
		}
		for _, r := range run {
			claimed[r.Key] = true
		}
	}
	return changes, claimed
}

// stays reports whether the desired assignment keeps all of r with its owner.
func stays(r schema.RangeState, want []assign.Slice) bool {
	pieces := split(r.Record.Range(), want)
	return len(pieces) == 1 && pieces[0].owner == r.Record.Owner
}

// drained reports whether merge-drained range r may be merged: its owner
// released it, or its drain budget has passed (then, as in any handoff after
// a drain timeout, records still in flight run again).
func (in Input) drained(r schema.RangeState) bool {
	if !mergeDrain(r) {
		return false
	}
	return r.Record.State == schema.StateReleased || in.drainOver(r)
}

// merge replaces run (adjacent ranges of one owner, all drained, all with
// state or all without) by one active range at the first range's key.
func (in Input) merge(tp assign.TopicPartition, run []schema.RangeState) Change {
	first, last := run[0], run[len(run)-1]
	rec := first.Record
	rec.Hi, rec.State, rec.Target, rec.DrainMs, rec.Gen, rec.Since = last.Record.Hi, schema.StateActive, "", 0, in.Gen, in.Now
	entry := first.Entry
	c := Change{What: fmt.Sprintf("merge %d ranges of %s into %s/%d %s", len(run), rec.Owner, tp.Topic, tp.Partition, rec.Range()), Defrag: true}
	for i, r := range run {
		c.Guards = append(c.Guards, guardRev(r.Key, r.Rev), guardRev(r.LedgerKey, r.EntryRev))
		rec.Reset = max(rec.Reset, r.Record.Reset) // an operator's reset stays visible (consumer/table.go)
		if i > 0 {
			if entry.Initialized() {
				entry = entry.Concat(r.Entry)
			}
			c.Writes = append(c.Writes, del(r.Key), del(r.LedgerKey))
		}
	}
	c.Writes = append(c.Writes, put(first.Key, schema.Encode(rec)), put(first.LedgerKey, string(ledger.Encode(entry))))
	return c
}
