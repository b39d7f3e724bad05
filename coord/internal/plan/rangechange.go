package plan

import (
	"fmt"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// What becomes of one existing range: left as it is, its moving parts
// revoked (phase one), handed off or failed over (phase two), or reset
// after damage; and the writes that replace it, every state between them
// a valid assignment.

// rangeChange decides what happens to one existing range.
func (in Input) rangeChange(r schema.RangeState, want []assign.Slice) (Change, bool) {
	rec := r.Record
	pieces := split(rec.Range(), want)
	// alive: the registration the record was written for is live. A
	// range of an earlier registration under the owner's id is failed
	// over, even to the same id: rewritten, it is the new registration's.
	owner, alive := in.Snap.OwnerOf(r)
	stays := len(pieces) == 1 && pieces[0].owner == rec.Owner && alive
	if !alive && in.Held[RangeObs{r.Key, r.Rev}] && rec.State != schema.StateReleased {
		return Change{}, false // the old owner may still be finishing (grace.go)
	}
	var out []next
	switch {
	case r.EntryErr != nil:
		// A damaged ledger entry: restart the range from the committed
		// offset (which is at or below anything the entry could have
		// said), keeping the owner until the next round.
		return in.replace(r, []next{{piece{rec.Range(), rec.Owner}, schema.StateActive, ""}}, true, "reset damaged ledger entry of"), true
	case rec.State == schema.StateActive && stays:
		return Change{}, false
	case rec.State == schema.StateActive && alive && owner.ReleasesUnasked() && !in.drainOver(r):
		// A leaving owner drains and releases the range unasked
		// (Session.Leave): no revoke to write, one round saved.
		return Change{}, false
	case rec.State == schema.StateActive && alive && !owner.ReleasesUnasked():
		// Phase one: the parts that move are revoked from the owner.
		for _, p := range pieces {
			if p.owner == rec.Owner {
				out = append(out, next{p, schema.StateActive, ""})
			} else {
				out = append(out, next{piece{p.r, rec.Owner}, schema.StateRevoking, p.owner})
			}
		}
		return in.replace(r, out, false, "revoke"), true
	case rec.State == schema.StateRevoking && alive && stays:
		// The assignment changed back while draining: keep it.
		out = append(out, next{pieces[0], schema.StateActive, ""})
		return in.replace(r, out, false, "keep"), true
	case rec.State == schema.StateRevoking && alive && !in.drainOver(r):
		return Change{}, false // still draining
	}
	// Phase two (released, drain timed out, or owner gone), or an active
	// range whose owner is gone: hand each part to its next owner.
	for _, p := range pieces {
		out = append(out, next{p, schema.StateActive, ""})
	}
	what := "hand off"
	switch {
	case !alive && rec.State != schema.StateReleased:
		what = "fail over"
	case rec.State == schema.StateRevoking:
		what = "hand off after drain timeout"
	case rec.State == schema.StateActive:
		what = "hand off after the leaving owner's drain timeout"
	}
	return in.replace(r, out, false, what), true
}

// replace writes the records that take the place of r. Its ledger entry is
// clipped to each part (and reset if asked); the change only applies if
// the record has not changed since the snapshot, nor the entry where the
// change writes one. A change that leaves the entry as it is (a whole range
// revoked, kept or handed off) does not compare it: the owner's flushes
// write the entry under the record's guard, and at P = 4,096 a leave's
// 2,048 revokes met the leaving member's flushes in most transactions
// (6.9 s of conflicts and retries in one round).
//
// A change must fit in one transaction: when r is cut into more parts than
// fit (each part is two writes), the first parts are written and the rest of
// r stays one range exactly as r was (owner, state, target) with its ledger
// entry clipped to it, for the next round to continue. Every state between
// is a valid assignment: no hash gains a second owner and none is left
// without a range.
func (in Input) replace(r schema.RangeState, parts []next, reset bool, what string) Change {
	tp := r.TP()
	c := Change{
		What:   fmt.Sprintf("%s %s/%d %s (owner %s, %s)", what, tp.Topic, tp.Partition, r.Record.Range(), r.Record.Owner, r.Record.State),
		Guards: []Guard{guardRev(r.Key, r.Rev)},
	}
	if reset || len(parts) > 1 || r.EntryRev == 0 {
		// The entry is written, from the snapshot's.
		c.Guards = append(c.Guards, guardRev(r.LedgerKey, r.EntryRev))
	}
	if 2*len(parts) > in.budget() {
		k := max(1, (in.budget()-2)/2) // two writes are left for the rest
		rest := r.Record
		rest.Lo, rest.Gen = parts[k].r.Lo, in.Gen
		entry := ledger.Entry{}
		if !reset {
			entry = r.Entry.Clip(rest.Range())
		}
		c.What += fmt.Sprintf(" (first %d of %d parts; %s stays as it is until the next round)", k, len(parts), rest.Range())
		parts = parts[:k]
		c.Writes = append(c.Writes,
			put(in.Schema.Range(tp.Topic, tp.Partition, rest.Lo), schema.Encode(rest)),
			put(in.Schema.LedgerEntry(tp.Topic, tp.Partition, rest.Lo), string(ledger.Encode(entry))))
		// The parts written now are cut from r: each needs its own entry.
		for _, p := range parts {
			rec := in.record(tp, p.piece, p.state, p.target)
			rec.Reset = r.Record.Reset // an owner that has not read a reset yet must see it in the parts
			c.Writes = append(c.Writes, put(in.Schema.Range(tp.Topic, tp.Partition, p.r.Lo), schema.Encode(rec)))
			e := ledger.Entry{}
			if !reset {
				e = r.Entry.Clip(p.r)
			}
			c.Writes = append(c.Writes, put(in.Schema.LedgerEntry(tp.Topic, tp.Partition, p.r.Lo), string(ledger.Encode(e))))
		}
		return c
	}
	for _, p := range parts {
		rec := in.record(tp, p.piece, p.state, p.target)
		// Carry an operator's reset on: an owner that has not read it yet
		// must still see the epoch grow in the parts it keeps, or it would
		// flush its older state over the reset (consumer/table.go).
		rec.Reset = r.Record.Reset
		if p.state == r.Record.State && p.owner == r.Record.Owner && p.r == r.Record.Range() {
			rec.Since = r.Record.Since
		}
		c.Writes = append(c.Writes, put(in.Schema.Range(tp.Topic, tp.Partition, p.r.Lo), schema.Encode(rec)))
		// The ledger entry only needs writing when the range is cut or
		// reset; otherwise it stays as its owner left it.
		if reset || len(parts) > 1 || r.EntryRev == 0 {
			e := ledger.Entry{}
			if !reset {
				e = r.Entry.Clip(p.r)
			}
			c.Writes = append(c.Writes, put(in.Schema.LedgerEntry(tp.Topic, tp.Partition, p.r.Lo), string(ledger.Encode(e))))
		}
	}
	return c
}
