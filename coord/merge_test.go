package coord

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// rig is the model store driven step by step by a test: a leader round, the
// owners' releases, the clock.
type rig struct {
	t      *testing.T
	store  *modelStore
	parts  []assign.PartitionWeight
	clock  time.Time
	seen   map[plan.RangeObs]time.Time
	moving bool // the group is not still: no new defragmentation
}

func newRig(t *testing.T, partitions int32) *rig {
	g := &rig{t: t, store: newModelStore(), clock: time.Now(), seen: map[plan.RangeObs]time.Time{}}
	for p := range partitions {
		g.parts = append(g.parts, assign.PartitionWeight{TopicPartition: assign.TopicPartition{Topic: "t", Partition: p}})
	}
	return g
}

func (g *rig) join(id string, leaving bool) {
	g.store.lease++
	g.store.put(planSchema.Member(id), mustJSON(schema.MemberInfo{V: recordVersion, ID: id, Host: "h", PID: 1, Weight: 1, Leaving: leaving}), g.store.lease)
}

// rangeAt writes an active range of t/p and its ledger entry (next offset
// next, pending offsets pending; no entry if next < 0).
func (g *rig) rangeAt(p int32, lo, hi uint64, owner string, next int64, pending ...int64) {
	rec := schema.RangeRecord{V: recordVersion, Topic: "t", Partition: p, Lo: lo, Hi: hi, Owner: owner, State: schema.StateActive, Gen: 1}
	g.store.put(planSchema.Range("t", p, lo), mustJSON(rec), 0)
	if next >= 0 {
		e := ledger.Entry{Segments: []ledger.Segment{{Lo: lo, Hi: hi, Next: next, Pending: pending}}}
		g.store.put(planSchema.LedgerEntry("t", p, lo), string(ledger.Encode(e)), 0)
	}
}

// round runs one leader round, each change applied alone; it returns the
// changes' descriptions.
func (g *rig) round() []string {
	g.t.Helper()
	snap := g.store.snapshot()
	plan.Observe(g.seen, snap, g.clock)
	changes := plan.Plan(plan.Input{
		Schema: planSchema, Snap: snap, Parts: g.parts, Now: g.clock, DrainTimeout: modelDrain,
		Gen: snap.Generation.Generation + 1, MaxTxnOps: modelMaxOps, Clock: g.clock, Seen: g.seen, Grace: modelGrace,
		Defrag: !g.moving,
	})
	var whats []string
	for _, c := range changes {
		ok, err := g.store.apply(c, modelMaxOps)
		if err != nil {
			g.t.Fatalf("change refused: %v: %s", err, c.What)
		}
		if ok {
			whats = append(whats, c.What)
		}
	}
	return whats
}

// release has every live owner release its revoked ranges, its ledger entry
// moved on to next (the owner's final state), as Session.Release writes it.
func (g *rig) release(next int64) {
	g.t.Helper()
	snap := g.store.snapshot()
	for _, r := range snap.Ranges {
		if r.Record.State != schema.StateRevoking {
			continue
		}
		if _, ok := snap.Members[r.Record.Owner]; !ok {
			continue
		}
		rec := r.Record
		rec.State = schema.StateReleased
		e := ledger.Entry{Segments: []ledger.Segment{{Lo: rec.Lo, Hi: rec.Hi, Next: next}}}
		ok, err := g.store.txn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.Rev)},
			[]clientv3.Op{clientv3.OpPut(r.Key, mustJSON(rec)), clientv3.OpPut(r.LedgerKey, string(ledger.Encode(e)))}, modelMaxOps)
		if err != nil || !ok {
			g.t.Fatalf("release %s: %v %v", r.Key, ok, err)
		}
	}
}

// layout describes the ranges of partition p as "lo-hi:owner:state" items.
func (g *rig) layout(p int32) string {
	var out []string
	for _, r := range g.store.snapshot().Partitions()[assign.TopicPartition{Topic: "t", Partition: p}] {
		out = append(out, fmt.Sprintf("%d-%d:%s:%s", r.Record.Lo, r.Record.Hi, r.Record.Owner, r.Record.State))
	}
	return strings.Join(out, " ")
}

const q = ledger.HashSpace / 4

// TestMergeTwoStep: two adjacent active ranges of the only member are first
// revoked to their owner; once it has released both, one transaction leaves
// one active range whose ledger entry joins the two final entries.
func TestMergeTwoStep(t *testing.T) {
	t.Parallel()
	g := newRig(t, 1)
	g.join("a", false)
	g.rangeAt(0, 0, 2*q, "a", 10)
	g.rangeAt(0, 2*q, ledger.HashSpace, "a", 20, 15)

	whats := g.round()
	if len(whats) != 2 || !strings.HasPrefix(whats[0], "revoke to merge") {
		t.Fatalf("first round: %q, want two revokes to merge", whats)
	}
	for _, r := range g.store.snapshot().Ranges {
		if r.Record.State != schema.StateRevoking || r.Record.Target != "a" || r.Record.DrainMs == 0 {
			t.Fatalf("after the first round: %+v, want revoking to a with a drain budget", r.Record)
		}
	}
	if w := g.round(); len(w) != 0 {
		t.Fatalf("a round while draining changed %q", w)
	}
	g.release(30)
	whats = g.round()
	if len(whats) != 1 || !strings.HasPrefix(whats[0], "merge 2 ranges of a") {
		t.Fatalf("after the release: %q, want one merge", whats)
	}
	snap := g.store.snapshot()
	if len(snap.Ranges) != 1 {
		t.Fatalf("after the merge: %s", g.layout(0))
	}
	r := snap.Ranges[0]
	if r.Record.Range() != ledger.Full || r.Record.State != schema.StateActive || r.Record.Owner != "a" || r.Record.Target != "" || r.Record.DrainMs != 0 {
		t.Fatalf("merged record %+v", r.Record)
	}
	// Both parts released at 30 with nothing pending: one segment.
	want := ledger.Entry{Segments: []ledger.Segment{{Lo: 0, Hi: ledger.HashSpace, Next: 30}}}
	if r.EntryErr != nil || len(r.Entry.Segments) != 1 || r.Entry.Segments[0].Range() != want.Segments[0].Range() || r.Entry.Segments[0].Next != 30 || len(r.Entry.Segments[0].Pending) != 0 {
		t.Fatalf("merged entry %+v (%v), want %+v", r.Entry, r.EntryErr, want)
	}
	if len(snap.Orphans) != 0 || len(snap.BadRanges) != 0 {
		t.Fatalf("left behind: orphans %v, bad %v", snap.Orphans, snap.BadRanges)
	}
	if w := g.round(); len(w) != 0 {
		t.Fatalf("a round after the merge changed %q", w)
	}
}

// TestMergeKeepsDistinctState: parts released at different offsets keep
// their own segments in the merged entry (nothing is claimed done that one
// part had not done).
func TestMergeKeepsDistinctState(t *testing.T) {
	t.Parallel()
	g := newRig(t, 1)
	g.join("a", false)
	g.rangeAt(0, 0, q, "a", 10)
	g.rangeAt(0, q, ledger.HashSpace, "a", 10)
	g.round()
	// Release them one at a time with different final states.
	snap := g.store.snapshot()
	for i, r := range snap.Ranges {
		rec := r.Record
		rec.State = schema.StateReleased
		e := ledger.Entry{Segments: []ledger.Segment{{Lo: rec.Lo, Hi: rec.Hi, Next: int64(40 + i), Pending: []int64{int64(5 + i)}}}}
		if ok, err := g.store.txn(nil, []clientv3.Op{clientv3.OpPut(r.Key, mustJSON(rec)), clientv3.OpPut(r.LedgerKey, string(ledger.Encode(e)))}, modelMaxOps); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if i == 0 {
			if w := g.round(); len(w) != 0 {
				t.Fatalf("merged with one part still draining: %q", w)
			}
		}
	}
	g.round()
	snap = g.store.snapshot()
	if len(snap.Ranges) != 1 {
		t.Fatalf("not merged: %s", g.layout(0))
	}
	want := []ledger.Segment{{Lo: 0, Hi: q, Next: 40, Pending: []int64{5}}, {Lo: q, Hi: ledger.HashSpace, Next: 41, Pending: []int64{6}}}
	got := snap.Ranges[0].Entry.Segments
	if len(got) != 2 || got[0].Next != want[0].Next || got[1].Next != want[1].Next || !slices.Equal(got[0].Pending, want[0].Pending) || !slices.Equal(got[1].Pending, want[1].Pending) || got[0].Hi != q {
		t.Fatalf("merged entry %+v, want %+v", got, want)
	}
	if err := snap.Ranges[0].Entry.Validate(ledger.Full); err != nil {
		t.Fatal(err)
	}
}

// TestMergeWaits: no merge drain starts while the partition has a handoff
// under way, for a leaving owner, or for a range whose entry has no state
// yet (its owner has not flushed it: there is nothing to join).
func TestMergeWaits(t *testing.T) {
	t.Parallel()
	t.Run("handoff under way", func(t *testing.T) {
		g := newRig(t, 1)
		g.join("a", false)
		g.join("b", false)
		// a keeps its half in two ranges; c crashed and its quarter
		// goes to b: the plan fails it over, and merges nothing
		// meanwhile.
		g.rangeAt(0, 0, q, "a", 10)
		g.rangeAt(0, q, 2*q, "a", 10)
		g.rangeAt(0, 2*q, 3*q, "b", 10)
		g.rangeAt(0, 3*q, ledger.HashSpace, "c", 10)
		whats := g.round()
		if len(whats) != 1 || !strings.HasPrefix(whats[0], "fail over") {
			t.Fatalf("round: %q, want one fail over", whats)
		}
		for _, w := range whats {
			if strings.Contains(w, "merge") {
				t.Fatalf("merge planned during a handoff: %q", w)
			}
		}
	})
	t.Run("group not still", func(t *testing.T) {
		g := newRig(t, 1)
		g.join("a", false)
		g.rangeAt(0, 0, q, "a", 10)
		g.rangeAt(0, q, 2*q, "a", 10)
		g.rangeAt(0, 2*q, ledger.HashSpace, "a", 10)
		g.moving = true
		if w := g.round(); len(w) != 0 {
			t.Fatalf("changes while the group moves: %q", w)
		}
		// A merge under way goes on while the group moves.
		g.moving = false
		if w := g.round(); len(w) != 3 {
			t.Fatalf("round: %q, want three revokes to merge", w)
		}
		g.moving = true
		g.release(11)
		if w := g.round(); len(w) != 1 || !strings.HasPrefix(w[0], "merge 3 ranges") {
			t.Fatalf("round: %q, want the merge under way to finish", w)
		}
	})
	t.Run("owner leaving", func(t *testing.T) {
		g := newRig(t, 1)
		g.join("a", true)
		g.join("b", false)
		g.rangeAt(0, 0, q, "a", 10)
		g.rangeAt(0, q, ledger.HashSpace, "a", 10)
		for _, w := range g.round() {
			if strings.Contains(w, "merge") {
				t.Fatalf("merge planned for a leaving owner: %q", w)
			}
		}
	})
	t.Run("no state yet", func(t *testing.T) {
		g := newRig(t, 1)
		g.join("a", false)
		g.rangeAt(0, 0, q, "a", 10)
		g.rangeAt(0, q, ledger.HashSpace, "a", -1)
		for _, w := range g.round() {
			if strings.Contains(w, "merge") {
				t.Fatalf("merge planned for a range without state: %q", w)
			}
		}
	})
}

// TestMergeDrainTakenBack: a range revoked to its owner for a merge goes
// back to active when the run breaks up (the neighbour's owner crashed and
// the assignor gives its part to someone else).
func TestMergeDrainTakenBack(t *testing.T) {
	t.Parallel()
	g := newRig(t, 1)
	g.join("a", false)
	g.rangeAt(0, 0, 2*q, "a", 10)
	g.rangeAt(0, 2*q, ledger.HashSpace, "a", 10)
	g.round() // both revoking to a
	// A second member joins: the assignor now gives b half the space,
	// which is the second range; the first stays with a alone.
	g.join("b", false)
	for i := 0; i < 10; i++ {
		g.round()
		g.release(12)
		g.clock = g.clock.Add(time.Second)
	}
	got := g.layout(0)
	if got != fmt.Sprintf("0-%d:a:active %d-%d:b:active", 2*q, 2*q, ledger.HashSpace) {
		t.Fatalf("layout %s", got)
	}
}

// TestMergeLongRun: a run longer than one transaction allows is merged in
// several pieces, each within etcd's limit, and then those pieces merge.
func TestMergeLongRun(t *testing.T) {
	t.Parallel()
	g := newRig(t, 1)
	g.join("a", false)
	const n = 150
	for i := range uint64(n) {
		g.rangeAt(0, ledger.HashSpace*i/n, ledger.HashSpace*(i+1)/n, "a", 7)
	}
	for i := 0; i < 10 && len(g.store.snapshot().Ranges) > 1; i++ {
		g.round() // store.txn refuses a change over modelMaxOps
		g.release(9)
	}
	if got := g.layout(0); got != fmt.Sprintf("0-%d:a:active", ledger.HashSpace) {
		t.Fatalf("layout %s", got)
	}
}
