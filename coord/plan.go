package coord

import (
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/ledger"
)

// change is one atomic step of a new assignment: the ops that replace one
// range record (and its ledger entry) or fill one gap, with compares that
// hold only if what the leader read is still current.
type change struct {
	what string
	cmps []clientv3.Cmp
	ops  []clientv3.Op
}

// planInput is everything the planner needs; planning itself does no I/O.
type planInput struct {
	schema       keys.Schema
	snap         *Snapshot
	parts        []PartitionWeight
	now          time.Time
	drainTimeout time.Duration
	gen          int64 // generation of the changes
	// held are owners gone for less than FailoverGrace: their ranges wait
	// (grace.go).
	held map[string]bool
}

// piece is a part of a range and who should own it next.
type piece struct {
	r     ledger.HashRange
	owner string
}

// next is a piece with the state its record gets.
type next struct {
	piece
	state, target string
}

// plan computes the changes that move the group from the snapshot toward
// the assignment the assignor wants, following the two-phase handoff:
//
//   - a range whose owner is alive and must give some of it up is split; the
//     parts that move become "revoking" (the owner drains them);
//   - a range that is "released", or whose owner's session is gone, or whose
//     drain timeout has passed, goes to its next owner with its ledger state;
//   - hash space no range covers (a new partition, or a damaged record) gets
//     new ranges with no ledger state (they start at the committed offset);
//   - a damaged ledger entry is replaced by one with no state.
//
// Ranges that keep their owner are not touched.
func plan(in planInput) ([]change, []Slice) {
	var eligible []MemberWeight
	for _, m := range in.snap.Members {
		if !m.Leaving {
			eligible = append(eligible, MemberWeight{ID: m.ID, Weight: m.Weight})
		}
	}
	desired := Assign(in.parts, eligible, in.snap.Slices())
	if len(desired) == 0 {
		return nil, nil
	}
	want := make(map[TopicPartition][]Slice)
	for _, s := range desired {
		want[s.TopicPartition] = append(want[s.TopicPartition], s)
	}
	have := in.snap.Partitions()
	var changes []change
	for _, p := range in.parts {
		tp := p.TopicPartition
		at := uint64(0)
		for _, r := range have[tp] {
			if r.Record.Lo > at {
				changes = append(changes, in.fill(tp, ledger.HashRange{Lo: at, Hi: r.Record.Lo}, want[tp]))
			}
			if c, ok := in.rangeChange(r, want[tp]); ok {
				changes = append(changes, c)
			}
			at = r.Record.Hi
		}
		if at < ledger.HashSpace {
			changes = append(changes, in.fill(tp, ledger.HashRange{Lo: at, Hi: ledger.HashSpace}, want[tp]))
		}
	}
	return changes, desired
}

// split cuts r along the desired slices of its partition.
func split(r ledger.HashRange, want []Slice) []piece {
	var out []piece
	for _, s := range want {
		c := s.Range.Intersect(r)
		if c.Empty() {
			continue
		}
		if n := len(out); n > 0 && out[n-1].owner == s.Owner && out[n-1].r.Hi == c.Lo {
			out[n-1].r.Hi = c.Hi
			continue
		}
		out = append(out, piece{r: c, owner: s.Owner})
	}
	return out
}

// fill creates ranges with no ledger state for a gap, deleting orphaned
// ledger keys inside it.
func (in planInput) fill(tp TopicPartition, gap ledger.HashRange, want []Slice) change {
	c := change{what: fmt.Sprintf("new ranges for %s/%d %s", tp.Topic, tp.Partition, gap)}
	for _, p := range split(gap, want) {
		key := in.schema.Range(tp.Topic, tp.Partition, p.r.Lo)
		// The key is free, or holds a damaged record being replaced.
		c.cmps = append(c.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", in.snap.BadRanges[key]))
		c.ops = append(c.ops,
			clientv3.OpPut(key, mustJSON(in.record(tp, p, StateActive, ""))),
			clientv3.OpPut(in.schema.LedgerEntry(tp.Topic, tp.Partition, p.r.Lo), string(ledger.Encode(ledger.Entry{}))))
	}
	for k := range in.snap.BadRanges {
		topic, part, lo, err := keys.ParseRangeKey(in.schema.Ranges(), k)
		if err == nil && topic == tp.Topic && part == tp.Partition && gap.Contains(uint32(lo)) && !startsPiece(gap, want, lo) {
			// A damaged record inside the gap that no new range
			// replaces. (A key whose name cannot be parsed is only
			// reported: it is not in any partition's hash space.)
			c.cmps = append(c.cmps, clientv3.Compare(clientv3.ModRevision(k), "=", in.snap.BadRanges[k]))
			c.ops = append(c.ops, clientv3.OpDelete(k))
		}
	}
	for _, k := range in.snap.Orphans {
		topic, part, lo, err := keys.ParseRangeKey(in.schema.Ledger(), k)
		if err == nil && topic == tp.Topic && part == tp.Partition && gap.Contains(uint32(lo)) && !startsPiece(gap, want, lo) {
			c.ops = append(c.ops, clientv3.OpDelete(k))
		}
	}
	return c
}

func startsPiece(gap ledger.HashRange, want []Slice, lo uint64) bool {
	for _, p := range split(gap, want) {
		if p.r.Lo == lo {
			return true
		}
	}
	return false
}

func (in planInput) record(tp TopicPartition, p piece, state, target string) RangeRecord {
	rec := RangeRecord{
		V: recordVersion, Topic: tp.Topic, Partition: tp.Partition, Lo: p.r.Lo, Hi: p.r.Hi,
		Owner: p.owner, State: state, Target: target, Gen: in.gen, Since: in.now,
	}
	if state == StateRevoking {
		rec.DrainMs = in.drainTimeout.Milliseconds()
	}
	return rec
}

// rangeChange decides what happens to one existing range.
func (in planInput) rangeChange(r RangeState, want []Slice) (change, bool) {
	rec := r.Record
	pieces := split(rec.Range(), want)
	_, alive := in.snap.Members[rec.Owner]
	stays := len(pieces) == 1 && pieces[0].owner == rec.Owner
	if !alive && in.held[rec.Owner] {
		return change{}, false // the old owner may still be finishing (grace.go)
	}
	var out []next
	switch {
	case r.EntryErr != nil:
		// A damaged ledger entry: restart the range from the committed
		// offset (which is at or below anything the entry could have
		// said), keeping the owner until the next round.
		return in.replace(r, []next{{piece{rec.Range(), rec.Owner}, StateActive, ""}}, true, "reset damaged ledger entry of"), true
	case rec.State == StateActive && stays:
		return change{}, false
	case rec.State == StateActive && alive:
		// Phase one: the parts that move are revoked from the owner.
		for _, p := range pieces {
			if p.owner == rec.Owner {
				out = append(out, next{p, StateActive, ""})
			} else {
				out = append(out, next{piece{p.r, rec.Owner}, StateRevoking, p.owner})
			}
		}
		return in.replace(r, out, false, "revoke"), true
	case rec.State == StateRevoking && alive && stays:
		// The assignment changed back while draining: keep it.
		out = append(out, next{pieces[0], StateActive, ""})
		return in.replace(r, out, false, "keep"), true
	case rec.State == StateRevoking && alive && in.now.Sub(rec.Since) < in.drainTimeout:
		return change{}, false // still draining
	}
	// Phase two (released, drain timed out, or owner gone), or an active
	// range whose owner is gone: hand each part to its next owner.
	for _, p := range pieces {
		out = append(out, next{p, StateActive, ""})
	}
	what := "hand off"
	if !alive {
		what = "fail over"
	} else if rec.State == StateRevoking {
		what = "hand off after drain timeout"
	}
	return in.replace(r, out, false, what), true
}

// replace writes the records that take the place of r. Its ledger entry is
// clipped to each part (and reset if asked); the change only applies if
// neither the record nor the entry changed since the snapshot.
func (in planInput) replace(r RangeState, parts []next, reset bool, what string) change {
	tp := r.TP()
	c := change{
		what: fmt.Sprintf("%s %s/%d %s (owner %s, %s)", what, tp.Topic, tp.Partition, r.Record.Range(), r.Record.Owner, r.Record.State),
		cmps: []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.Rev),
			clientv3.Compare(clientv3.ModRevision(r.LedgerKey), "=", r.EntryRev),
		},
	}
	for _, p := range parts {
		rec := in.record(tp, p.piece, p.state, p.target)
		if p.state == r.Record.State && p.owner == r.Record.Owner && p.r == r.Record.Range() {
			rec.Since = r.Record.Since
		}
		c.ops = append(c.ops, clientv3.OpPut(in.schema.Range(tp.Topic, tp.Partition, p.r.Lo), mustJSON(rec)))
		// The ledger entry only needs writing when the range is cut or
		// reset; otherwise it stays as its owner left it.
		if reset || len(parts) > 1 || r.EntryRev == 0 {
			e := ledger.Entry{}
			if !reset {
				e = r.Entry.Clip(p.r)
			}
			c.ops = append(c.ops, clientv3.OpPut(in.schema.LedgerEntry(tp.Topic, tp.Partition, p.r.Lo), string(ledger.Encode(e))))
		}
	}
	return c
}
