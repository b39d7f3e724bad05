package plan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Change is one atomic step of a new assignment: the writes that replace
// one range record (and its ledger entry) or fill one gap, with guards that
// hold only if what the leader read is still current. It is plain data:
// coord turns it into one etcd transaction's compares and ops, and tests
// assert on the guards, which are the safety argument.
type Change struct {
	What   string // what the change does, for the leader's log
	Guards []Guard
	Writes []Write
	// Defrag marks a step of a merge or of the contiguous layout: it does
	// not count as the group moving (SettleTracker).
	Defrag bool
}

// Guard holds while Key is as the leader read it: its ModRevision is
// still Rev, and Rev 0 means the key must not exist. With Created, it is
// the key's CreateRevision that must be Rev: the same registration,
// whatever has been written to it since.
type Guard struct {
	Key     string
	Rev     int64
	Created bool
}

// Write puts Value at Key (under Lease, unless 0), or deletes Key.
type Write struct {
	Key    string
	Value  string
	Delete bool
	Lease  int64
}

func guardRev(key string, rev int64) Guard { return Guard{Key: key, Rev: rev} }

func put(key, value string) Write { return Write{Key: key, Value: value} }

func del(key string) Write { return Write{Key: key, Delete: true} }

// Input is everything the planner needs; planning itself does no I/O.
type Input struct {
	Schema       schema.Keys
	Snap         *schema.Snapshot
	Parts        []assign.PartitionWeight
	Now          time.Time // the wall-clock time records are written with
	DrainTimeout time.Duration
	Gen          int64 // generation of the changes
	MaxTxnOps    int   // the etcd server's --max-txn-ops; 0 means 128

	// Clock is the leader's monotonic now, and Seen when it first observed
	// each revoking record (time.Now values of this process, never a
	// stored time). A revoking range is handed on once its drain budget
	// plus Grace has passed since then; a record not in Seen counts as
	// observed now. See drainOver.
	Clock time.Time
	Seen  map[RangeObs]time.Time
	Grace time.Duration
	// Held are ranges whose owner's registration has been gone for less
	// than the failover grace: they wait (GoneTracker).
	Held map[RangeObs]bool
	// Defrag allows new merges and the contiguous layout: the group has
	// been still for a while (SettleTracker). Merges already under way go on
	// without it.
	Defrag bool
	// Target, when set, is the layout balanced by load the leader holds
	// to: it replaces Assign's answer and the contiguous layout.
	Target []assign.Slice
	// CoPartitioned are the sets of topics whose partition p gets the
	// ranges and owners of its set's first topic's partition p
	// (assign.CoPartition), whatever layout was chosen; the assignor lays
	// out the first topics' partitions alone (assign.CoPartitionLeads).
	CoPartitioned [][]string
}

// RangeObs names one version of a range record: a rewrite of the record
// (new ModRevision) is a new revoke, observed afresh.
type RangeObs struct {
	Key string
	Rev int64
}

// drainOver reports whether the owner of revoking range r has had its whole
// drain budget: DrainMs (or the leader's DrainTimeout if the record has
// none) plus grace, counted from when this leader first observed the
// record. The owner counts DrainMs on its own clock from when it first sees
// the revoke, which is at most the delivery delay after the write; the write
// is before the leader's observation, so grace covers the delivery. No
// wall-clock instant of another machine (the record's Since) is used, so
// clock skew cannot cut a drain short; a new leader starts counting again.
//
// A leaving member drains its active ranges unasked, with the budget it
// wrote to leaving/<id>, from as soon as its leaving write succeeds: the
// same count applies, from when this leader first saw the owner leaving
// (after that write), with the grace covering the member's delay in
// starting, as it covers a revoke's delivery.
func (in Input) drainOver(r schema.RangeState) bool {
	budget := in.DrainTimeout
	if r.Record.DrainMs > 0 {
		budget = time.Duration(r.Record.DrainMs) * time.Millisecond
	}
	if m, _ := in.Snap.OwnerOf(r); r.Record.State == schema.StateActive && m.ReleasesUnasked() {
		budget = time.Duration(m.DrainMs) * time.Millisecond
	}
	at, ok := in.Seen[RangeObs{r.Key, r.Rev}]
	if !ok {
		return false
	}
	return in.Clock.Sub(at) >= budget+in.Grace
}

// budget is how many compares, and how many ops, one change may hold: apply
// adds the leadership guard and the generation write to every transaction.
func (in Input) budget() int {
	n := in.MaxTxnOps
	if n <= 0 {
		n = 128
	}
	return n - 1
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

// Plan computes the changes that move the group from the snapshot toward
// the assignment the assignor wants, following the two-phase handoff:
//
//   - a range whose owner is alive and must give some of it up is split; the
//     parts that move become "revoking" (the owner drains them);
//   - a range that is "released", or whose owner's session is gone, or whose
//     drain timeout has passed, goes to its next owner with its ledger state;
//   - hash space no range covers (a new partition, or a damaged record) gets
//     new ranges with no ledger state (they start at the committed offset);
//   - a damaged ledger entry is replaced by one with no state;
//   - adjacent ranges of one owner are merged (new merges only with
//     Input.Defrag).
//
// Ranges that keep their owner are not touched, except to merge them.
func Plan(in Input) []Change {
	var changes []Change
	for _, k := range slices.Sorted(maps.Keys(in.Snap.BadMembers)) {
		changes = append(changes, Change{
			What:   fmt.Sprintf("delete member key %s written without a lease", k),
			Guards: []Guard{guardRev(k, in.Snap.BadMembers[k])},
			Writes: []Write{del(k)},
		})
	}
	var eligible []assign.MemberWeight
	for _, m := range in.Snap.Members {
		if !m.Leaving {
			eligible = append(eligible, assign.MemberWeight{ID: m.ID, Weight: m.Weight})
		}
	}
	prev := in.Snap.Slices()
	desired, contiguous := in.Target, false
	if desired == nil {
		parts := assign.CoPartitionLeads(in.Parts, in.CoPartitioned)
		desired = assign.Assign(parts, eligible, prev)
		contiguous = in.Defrag && useContiguous(in.Snap, len(parts), len(eligible), desired)
		if contiguous {
			desired = assign.AssignContiguous(parts, eligible, prev)
		}
	}
	if len(desired) == 0 {
		return changes
	}
	desired = assign.CoPartition(desired, in.Parts, in.CoPartitioned)
	want := make(map[assign.TopicPartition][]assign.Slice)
	for _, s := range desired {
		want[s.TopicPartition] = append(want[s.TopicPartition], s)
	}
	have := in.Snap.Partitions()
	for _, p := range in.Parts {
		tp := p.TopicPartition
		at := uint64(0)
		merges, merging := in.merges(tp, have[tp], want[tp])
		changes = append(changes, merges...)
		for _, r := range have[tp] {
			if r.Record.Lo > at {
				changes = append(changes, in.fill(tp, ledger.HashRange{Lo: at, Hi: r.Record.Lo}, want[tp])...)
			}
			if merging[r.Key] {
				// merge.go deals with it this round.
			} else if c, ok := in.rangeChange(r, want[tp]); ok {
				c.Defrag = contiguous
				changes = append(changes, c)
			}
			at = r.Record.Hi
		}
		if at < ledger.HashSpace {
			changes = append(changes, in.fill(tp, ledger.HashRange{Lo: at, Hi: ledger.HashSpace}, want[tp])...)
		}
		changes = append(changes, in.clean(tp, have[tp], want[tp])...)
	}
	return append(changes, in.handoffPlans(have, want)...)
}

// split cuts r along the desired slices of its partition.
func split(r ledger.HashRange, want []assign.Slice) []piece {
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

// fill creates ranges with no ledger state for a gap, deleting damaged
// range records and orphaned ledger keys inside it.
//
// A change must fit in one transaction (budget): a gap cut into more pieces
// than fit gets its first pieces now and the rest stays a gap, which the next
// round fills (every state between is a valid assignment: the rest of the gap
// had no owner before either). Deletes that do not fit with the pieces
// they lie in go into changes of their own.
func (in Input) fill(tp assign.TopicPartition, gap ledger.HashRange, want []assign.Slice) []Change {
	pieces := split(gap, want)
	budget := in.budget()
	// Keys inside the gap that no new range replaces, in hash order: damaged
	// records (deleted if unchanged) and orphaned ledger entries. (A key
	// whose name cannot be parsed is only reported: it is not in any
	// partition's hash space.)
	type doomed struct {
		lo    uint64
		guard *Guard
		key   string
	}
	var dels []doomed
	for k, rev := range in.Snap.BadRanges {
		topic, part, lo, err := schema.ParseRangeKey(in.Schema.Ranges(), k)
		if err == nil && topic == tp.Topic && part == tp.Partition && gap.Contains(uint32(lo)) && !startsPiece(pieces, lo) {
			g := guardRev(k, rev)
			dels = append(dels, doomed{lo, &g, k})
		}
	}
	for _, k := range in.Snap.Orphans {
		topic, part, lo, err := schema.ParseRangeKey(in.Schema.Ledger(), k)
		if err == nil && topic == tp.Topic && part == tp.Partition && gap.Contains(uint32(lo)) && !startsPiece(pieces, lo) {
			dels = append(dels, doomed{lo, nil, k})
		}
	}
	slices.SortStableFunc(dels, func(a, b doomed) int { return cmp.Compare(a.lo, b.lo) })

	c := Change{}
	var spill []Change
	add := func(d doomed) {
		target := &c
		if len(c.Writes)+1 > budget || len(c.Guards)+1 > budget {
			if len(spill) == 0 || len(spill[len(spill)-1].Writes)+1 > budget || len(spill[len(spill)-1].Guards)+1 > budget {
				spill = append(spill, Change{What: fmt.Sprintf("delete damaged and orphaned keys in %s/%d %s", tp.Topic, tp.Partition, gap)})
			}
			target = &spill[len(spill)-1]
		}
		if d.guard != nil {
			target.Guards = append(target.Guards, *d.guard)
		}
		target.Writes = append(target.Writes, del(d.key))
	}
	filled := ledger.HashRange{Lo: gap.Lo, Hi: gap.Lo}
	for i, p := range pieces {
		if i > 0 && (len(c.Writes)+2 > budget || len(c.Guards)+1 > budget) {
			break
		}
		key := in.Schema.Range(tp.Topic, tp.Partition, p.r.Lo)
		// The key is free, or holds a damaged record being replaced.
		c.Guards = append(c.Guards, guardRev(key, in.Snap.BadRanges[key]))
		c.Writes = append(c.Writes,
			put(key, schema.Encode(in.record(tp, p, schema.StateActive, ""))),
			put(in.Schema.LedgerEntry(tp.Topic, tp.Partition, p.r.Lo), string(ledger.Encode(ledger.Entry{}))))
		filled.Hi = p.r.Hi
		for len(dels) > 0 && p.r.Contains(uint32(dels[0].lo)) {
			add(dels[0])
			dels = dels[1:]
		}
	}
	c.What = fmt.Sprintf("new ranges for %s/%d %s", tp.Topic, tp.Partition, filled)
	if filled != gap {
		c.What += fmt.Sprintf(" (part of the gap %s; the rest is filled next round)", gap)
	}
	return append([]Change{c}, spill...)
}

// clean deletes damaged range records (an overlapping one, say) and orphaned
// ledger keys that lie inside a range of tp, each only if unchanged since the
// snapshot. (fill deletes those in gaps.) A key where a range of this round's
// plan starts is left alone: that range's write replaces it.
func (in Input) clean(tp assign.TopicPartition, have []schema.RangeState, want []assign.Slice) []Change {
	type doomed struct{ key, what string }
	var dels []doomed
	find := func(prefix string, k string) {
		topic, part, lo, err := schema.ParseRangeKey(prefix, k)
		if err != nil || topic != tp.Topic || part != tp.Partition {
			return
		}
		i, _ := slices.BinarySearchFunc(have, lo, func(r schema.RangeState, lo uint64) int { return cmp.Compare(r.Record.Hi, lo+1) })
		if i == len(have) || !have[i].Record.Range().Contains(uint32(lo)) || startsPiece(split(have[i].Record.Range(), want), lo) {
			return
		}
		dels = append(dels, doomed{k, have[i].Record.Range().String()})
	}
	for k := range in.Snap.BadRanges {
		find(in.Schema.Ranges(), k)
	}
	for _, k := range in.Snap.Orphans {
		find(in.Schema.Ledger(), k)
	}
	slices.SortFunc(dels, func(a, b doomed) int { return cmp.Compare(a.key, b.key) })
	var out []Change
	for _, d := range dels {
		if n := len(out); n == 0 || len(out[n-1].Writes) >= in.budget() {
			out = append(out, Change{What: fmt.Sprintf("delete damaged or orphaned keys inside ranges of %s/%d", tp.Topic, tp.Partition)})
		}
		c := &out[len(out)-1]
		rev, bad := in.Snap.BadRanges[d.key]
		if !bad {
			rev = in.Snap.OrphanRevs[d.key]
		}
		c.Guards = append(c.Guards, guardRev(d.key, rev))
		c.Writes = append(c.Writes, del(d.key))
		c.What += fmt.Sprintf(" %s (in %s)", d.key, d.what)
	}
	return out
}

func startsPiece(pieces []piece, lo uint64) bool {
	for _, p := range pieces {
		if p.r.Lo == lo {
			return true
		}
	}
	return false
}

func (in Input) record(tp assign.TopicPartition, p piece, st, target string) schema.RangeRecord {
	rec := schema.RangeRecord{
		V: schema.RecordVersion, Topic: tp.Topic, Partition: tp.Partition, Lo: p.r.Lo, Hi: p.r.Hi,
		Owner: p.owner, State: st, Target: target, Gen: in.Gen, Since: in.Now,
	}
	if st == schema.StateRevoking {
		rec.DrainMs = in.DrainTimeout.Milliseconds()
	}
	return rec
}

// useContiguous decides whether the leader settles the group on the
// contiguous layout instead of assign.Assign's answer want: only in line mode, only
// when no range is being handed to another member (a burst of joins moves
// little while it lasts, and the layout moves once after it), and only when
// want has more slices than any contiguous layout can (P + M − 1).
func useContiguous(snap *schema.Snapshot, parts, members int, want []assign.Slice) bool {
	if members <= parts || len(want) <= parts+members-1 {
		return false
	}
	for _, r := range snap.Ranges {
		if r.Record.State != schema.StateActive && r.Record.Target != r.Record.Owner {
			return false
		}
	}
	return true
}
