package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// groupOf builds a snapshot of members (weight 1) owning layout, every range
// active and written at revision rev.
func groupOf(layout []assign.Slice, rev int64, members ...string) *schema.Snapshot {
	s := schema.Group{Prefix: "/keyshare", Name: "g"}.Keys()
	snap := &schema.Snapshot{Members: make(map[string]schema.Member)}
	for _, id := range members {
		snap.Members[id] = schema.Member{MemberInfo: schema.MemberInfo{ID: id, Weight: 1}}
	}
	for _, sl := range layout {
		snap.Ranges = append(snap.Ranges, schema.RangeState{
			Key:    s.Range(sl.Topic, sl.Partition, sl.Range.Lo),
			Record: schema.RangeRecord{Topic: sl.Topic, Partition: sl.Partition, Lo: sl.Range.Lo, Hi: sl.Range.Hi, Owner: sl.Owner, State: schema.StateActive},
			Rev:    rev,
		})
	}
	return snap
}

func TestDecodeLoads(t *testing.T) {
	t.Parallel()
	s := schema.Group{Prefix: "/keyshare", Name: "g"}.Keys()
	good, _ := json.Marshal(schema.LoadReport{V: 1, Member: "a", Window: 5, Ranges: []assign.RangeLoad{{Topic: "t", Lo: 0, Hi: 10, BusyPerSec: 1}}})
	wrongName, _ := json.Marshal(schema.LoadReport{V: 1, Member: "a", Window: 5})
	ghost, _ := json.Marshal(schema.LoadReport{V: 1, Member: "ghost", Window: 5})
	now := time.Now()
	kvs := map[string]arrivedKV{
		s.Load("a"):     {kv: &mvccpb.KeyValue{Key: []byte(s.Load("a")), Value: good, ModRevision: 7}, at: now},
		s.Load("b"):     {kv: &mvccpb.KeyValue{Key: []byte(s.Load("b")), Value: []byte(`{"v":1,"member":"b","window":NaN}`), ModRevision: 8}, at: now},
		s.Load("c"):     {kv: &mvccpb.KeyValue{Key: []byte(s.Load("c")), Value: wrongName, ModRevision: 9}, at: now},
		s.Load("ghost"): {kv: &mvccpb.KeyValue{Key: []byte(s.Load("ghost")), Value: ghost, ModRevision: 10}, at: now},
	}
	members := map[string]schema.Member{"a": {}, "b": {}, "c": {}}
	loads, bad, memo := decodeLoads(s, kvs, members, nil)
	if len(loads) != 1 || loads["a"].Rev != 7 || !loads["a"].Arrived.Equal(now) || loads["a"].Report.Ranges[0].BusyPerSec != 1 {
		t.Fatalf("loads %+v: want a's report only, with its revision and arrival", loads)
	}
	for _, id := range []string{"b", "c", "ghost"} {
		if bad[id] == nil {
			t.Errorf("%s's report not refused", id)
		}
	}
	if !strings.Contains(bad["ghost"].Error(), "not a registered member") {
		t.Errorf("ghost: %v", bad["ghost"])
	}
	// Unchanged keys are not decoded again: a memo entry with a marker
	// survives.
	m := memo[s.Load("a")]
	m.report.Window = 42
	memo[s.Load("a")] = m
	loads, _, _ = decodeLoads(s, kvs, members, memo)
	if loads["a"].Report.Window != 42 {
		t.Fatal("an unchanged report was decoded again")
	}
}

func TestOwnsReported(t *testing.T) {
	t.Parallel()
	half := ledger.HashSpace / 2
	snap := groupOf([]assign.Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, ledger.HashSpace, "b")}, 10, "a", "b")
	report := func(rev int64, lo, hi uint64) schema.ReceivedLoad {
		return schema.ReceivedLoad{Rev: rev, Report: schema.LoadReport{Ranges: []assign.RangeLoad{{Topic: "t", Lo: lo, Hi: hi}}}}
	}
	parts := snap.Partitions()
	if ok, stale, _ := ownsReported(parts, "a", report(11, 0, half)); !ok || stale {
		t.Fatal("a's own range: want ok")
	}
	if ok, stale, _ := ownsReported(parts, "a", report(9, 0, half)); ok || !stale {
		t.Fatal("a report older than the range record: want stale")
	}
	if ok, stale, what := ownsReported(parts, "a", report(11, half, ledger.HashSpace)); ok || stale || what == "" {
		t.Fatal("b's range reported by a after it was b's: want bad")
	}
	if ok, stale, _ := ownsReported(parts, "a", report(11, 0, half/2)); ok || stale {
		t.Fatal("a part of a's range: want bad")
	}
	snap.Ranges[0].Record.State, snap.Ranges[0].Record.Target = schema.StateRevoking, "b"
	if ok, stale, _ := ownsReported(snap.Partitions(), "a", report(11, 0, half)); ok || !stale {
		t.Fatal("a range being handed off: want stale (not used, not warned)")
	}
}

func testBalancer(t *testing.T) (*loadBalancer, *bytes.Buffer) {
	var logs bytes.Buffer
	cfg := DefaultConfig()
	cfg.LoadReportInterval, cfg.LoadCooldown = time.Second, 10*time.Second
	return newLoadBalancer(cfg, hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), &loadCounter{}), &logs
}

// TestLoadBalancerWarnsOnce: a bad report is warned about once per member
// and kind, however many rounds see it, and again if it goes and comes back.
func TestLoadBalancerWarnsOnce(t *testing.T) {
	t.Parallel()
	b, logs := testBalancer(t)
	half := ledger.HashSpace / 2
	snap := groupOf([]assign.Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, ledger.HashSpace, "b")}, 10, "a", "b")
	snap.BadLoads = map[string]error{"a": &schema.BadValueError{Key: "k", Problem: "NaN"}, "ghost": &schema.BadValueError{Key: "g", Problem: "not registered"}}
	snap.Loads = map[string]schema.ReceivedLoad{"b": {Rev: 11, Report: schema.LoadReport{Ranges: []assign.RangeLoad{{Topic: "t", Lo: 0, Hi: half}}}}}
	for range 5 {
		loads, _ := b.trusted(snap)
		if len(loads) != 0 {
			t.Fatalf("trusted %v: want none", loads)
		}
	}
	for _, who := range []string{"a", "b", "ghost"} {
		if n := strings.Count(logs.String(), "reporter="+who+" "); n != 1 {
			t.Fatalf("%d warnings about %s: want 1\n%s", n, who, logs.String())
		}
	}
	delete(snap.BadLoads, "a")
	b.trusted(snap)
	snap.BadLoads["a"] = &schema.BadValueError{Key: "k", Problem: "NaN"}
	b.trusted(snap)
	if n := strings.Count(logs.String(), "reporter=a "); n != 2 {
		t.Fatalf("%d warnings about a after its bad report came back: want 2", n)
	}
}

// halvesOfOne is one partition t/0 split in halves between members a and b.
func halvesOfOne() (assign.TopicPartition, []assign.PartitionWeight, []assign.MemberWeight, []assign.Slice) {
	tp := tpOf("t", 0)
	half := ledger.HashSpace / 2
	return tp, []assign.PartitionWeight{{TopicPartition: tp}}, []assign.MemberWeight{mw("a", 1), mw("b", 1)},
		[]assign.Slice{sl("t", 0, 0, half, "a"), sl("t", 0, half, ledger.HashSpace, "b")}
}

// TestLoadBalancerJudges: the leader moves by load only when the group is
// still and at rest, every owner reported since, and the cooldown passed;
// the layout it moves to is held while the group's shape stays.
func TestLoadBalancerJudges(t *testing.T) {
	t.Parallel()
	tp, parts, members, layout := halvesOfOne()
	truth := skew{parts: map[assign.TopicPartition][64]float64{tp: front(8, 0.9, 10)}}
	reports := truth.reportsOf(layout)
	snap := groupOf(layout, 10, "a", "b")
	t0 := time.Now()
	arrive := func(at time.Time) {
		snap.Loads = map[string]schema.ReceivedLoad{}
		for _, s := range layout {
			snap.Loads[s.Owner] = schema.ReceivedLoad{Rev: 20, Arrived: at, Report: schema.LoadReport{Member: s.Owner, Ranges: []assign.RangeLoad{reports[assign.RangeKey{TP: tp, Lo: s.Range.Lo, Hi: s.Range.Hi}]}}}
		}
	}
	b, logs := testBalancer(t)
	if w := b.wanted(snap, parts, members); !slicesEqual(w, layout) {
		t.Fatalf("a new leader did not take the settled layout: %v", w)
	}
	arrive(t0.Add(-time.Second))
	b.rested(snap, 0, t0)
	if b.judge(snap, parts, members, true, t0.Add(time.Second)) != nil {
		t.Fatal("moved on reports that arrived before the group came to rest")
	}
	arrive(t0.Add(time.Second))
	if b.judge(snap, parts, members, false, t0.Add(2*time.Second)) != nil {
		t.Fatal("moved while the group is not still")
	}
	// One range unreported (b's report lists nothing): wait, whatever the
	// time, rather than guess its load.
	full := snap.Loads["b"]
	snap.Loads["b"] = schema.ReceivedLoad{Rev: full.Rev, Arrived: full.Arrived, Report: schema.LoadReport{Member: "b"}}
	if b.judge(snap, parts, members, true, t0.Add(time.Hour)) != nil {
		t.Fatal("moved with a range nobody reported")
	}
	snap.Loads["b"] = full
	want := b.judge(snap, parts, members, true, t0.Add(2*time.Second))
	if want == nil {
		t.Fatalf("no move on 90 %% of the load in an eighth\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "moving split points by load") || !strings.Contains(logs.String(), "hash_space_moved=") {
		t.Fatalf("no Info line for the move:\n%s", logs.String())
	}
	if c := b.counts.m; c.Moves != 1 || c.HashSpaceMoved <= 0 || c.Before <= c.After {
		t.Fatalf("counters %+v", c)
	}
	if w := b.wanted(snap, parts, members); !slicesEqual(w, want) {
		t.Fatal("the load layout is not held while the group keeps its shape")
	}
	// Within the cooldown nothing moves, even on new skew.
	b.rested(snap, 0, t0.Add(3*time.Second))
	arrive(t0.Add(4 * time.Second))
	if b.judge(snap, parts, members, true, t0.Add(5*time.Second)) != nil {
		t.Fatal("moved within the cooldown")
	}
	// A member joins: the change is placed by load (assign.StickyByLoad), and
	// that layout is held. The reports are gone (stale in a burst of
	// handoffs): the load line of the last judgement places it.
	snap.Members["c"] = schema.Member{MemberInfo: schema.MemberInfo{ID: "c", Weight: 1}}
	snap.Loads = nil
	three := append(slices.Clone(members), mw("c", 1))
	joined := b.wanted(snap, parts, three)
	if err := checkCover(parts, three, joined); err != nil || !strings.Contains(logs.String(), "placing the change by load") {
		t.Fatalf("join on a load layout: %v, %v\n%s", joined, err, logs.String())
	}
	if w := b.wanted(snap, parts, three); !slicesEqual(w, joined) {
		t.Fatal("the layout placed by load for the join is not held")
	}
	// Down to one member (whole partitions): width places it.
	delete(snap.Members, "b")
	delete(snap.Members, "c")
	if w := b.wanted(snap, parts, members[:1]); w != nil {
		t.Fatalf("whole-partition mode held a load layout: %v", w)
	}
	// Width balance: nothing at all.
	bw, _ := testBalancer(t)
	bw.cfg.Balance = BalanceWidth
	bw.rested(snap, 0, t0)
	if bw.wanted(snap, parts, members) != nil || bw.judge(snap, parts, members, true, t0.Add(time.Hour)) != nil {
		t.Fatal("balance width moved by load")
	}
}

// TestLoadBalancerLeavesIdleGroup: the same skew as TestLoadBalancerJudges
// at a twentieth of the load (the busiest member under half a busy worker)
// moves nothing with the default LoadMinBusy, and moves with 0. A nearly
// idle group of 4,096 partitions once moved half its hash space on the skew
// of a light load, pausing 2,048 partitions for no gain anyone could see.
func TestLoadBalancerLeavesIdleGroup(t *testing.T) {
	t.Parallel()
	tp, parts, members, layout := halvesOfOne()
	reports := skew{parts: map[assign.TopicPartition][64]float64{tp: front(8, 0.9, 0.5)}}.reportsOf(layout)
	t0 := time.Now()
	judged := func(minBusy float64) []assign.Slice {
		snap := groupOf(layout, 10, "a", "b")
		snap.Loads = map[string]schema.ReceivedLoad{}
		for _, s := range layout {
			snap.Loads[s.Owner] = schema.ReceivedLoad{Rev: 20, Arrived: t0.Add(time.Second), Report: schema.LoadReport{Member: s.Owner, Ranges: []assign.RangeLoad{reports[assign.RangeKey{TP: tp, Lo: s.Range.Lo, Hi: s.Range.Hi}]}}}
		}
		b, _ := testBalancer(t)
		b.cfg.LoadMinBusy = minBusy
		b.rested(snap, 0, t0)
		return b.judge(snap, parts, members, true, t0.Add(2*time.Second))
	}
	if w := judged(DefaultConfig().LoadMinBusy); w != nil {
		t.Fatalf("moved a group whose busiest member is below LoadMinBusy: %v", w)
	}
	if judged(0) == nil {
		t.Fatal("no move with LoadMinBusy 0: the test's skew does not call for one")
	}
}

func slicesEqual(a, b []assign.Slice) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAdoptable(t *testing.T) {
	t.Parallel()
	parts := []assign.PartitionWeight{{TopicPartition: tpOf("t", 0)}}
	members := []assign.MemberWeight{mw("a", 1), mw("b", 1)}
	q := ledger.HashSpace / 4
	cases := []struct {
		name   string
		layout []assign.Slice
		ok     bool
	}{
		{"two spans", []assign.Slice{sl("t", 0, 0, 2*q, "a"), sl("t", 0, 2*q, ledger.HashSpace, "b")}, true},
		{"adjacent ranges of one owner count once", []assign.Slice{sl("t", 0, 0, q, "a"), sl("t", 0, q, 2*q, "a"), sl("t", 0, 2*q, ledger.HashSpace, "b")}, true},
		{"a gap", []assign.Slice{sl("t", 0, 0, q, "a"), sl("t", 0, 2*q, ledger.HashSpace, "b")}, false},
		{"a member owns nothing", []assign.Slice{sl("t", 0, 0, ledger.HashSpace, "a")}, false},
		{"fragmented", []assign.Slice{sl("t", 0, 0, q, "a"), sl("t", 0, q, 2*q, "b"), sl("t", 0, 2*q, 3*q, "a"), sl("t", 0, 3*q, ledger.HashSpace, "b")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := adoptable(groupOf(c.layout, 1, "a", "b"), parts, members)
			if (got != nil) != c.ok {
				t.Fatalf("adoptable = %v, want ok %v", got, c.ok)
			}
			if got != nil {
				if err := checkCover(parts, members, got); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
	snap := groupOf([]assign.Slice{sl("t", 0, 0, 2*q, "a"), sl("t", 0, 2*q, ledger.HashSpace, "b")}, 1, "a", "b")
	snap.Ranges[1].Record.State = schema.StateRevoking
	if adoptable(snap, parts, members) != nil {
		t.Fatal("adopted a layout with a handoff under way")
	}
}

func TestLoadConfigValidate(t *testing.T) {
	t.Parallel()
	base := DefaultConfig()
	base.Group, base.Topics = "g", []string{"t"}
	base.Partitions = func(_ context.Context, _ []string) (map[string]int32, error) { return nil, nil }
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		field string
		set   func(*Config)
	}{
		{"Config.LoadMinGain", func(c *Config) { c.LoadMinGain = 1 }},
		{"Config.LoadMinGain", func(c *Config) { c.LoadMinGain = math.NaN() }},
		{"Config.LoadCooldown", func(c *Config) { c.LoadCooldown = time.Second }},
		{"Config.LoadMinBusy", func(c *Config) { c.LoadMinBusy = -0.1 }},
		{"Config.LoadMinBusy", func(c *Config) { c.LoadMinBusy = math.NaN() }},
	} {
		cfg := base
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("error %v: want one naming %s", err, c.field)
		}
	}
}

// TestPlanHoldsLoadTarget: a layout placed by load is not width's: without
// the target the plan (with defragmentation allowed) would move it back;
// with it the plan leaves it alone, and a new target is reached through
// revokes (the first phase of the handoff).
func TestPlanHoldsLoadTarget(t *testing.T) {
	t.Parallel()
	parts := []assign.PartitionWeight{{TopicPartition: tpOf("t", 0)}}
	eighth := ledger.HashSpace / 8
	layout := []assign.Slice{sl("t", 0, 0, eighth, "a"), sl("t", 0, eighth, ledger.HashSpace, "b")}
	snap := groupOf(layout, 10, "a", "b")
	in := plan.Input{Schema: schema.Group{Prefix: "/keyshare", Name: "g"}.Keys(), Snap: snap, Parts: parts, Now: time.Now(), DrainTimeout: time.Second, Gen: 2, Clock: time.Now(), Defrag: true}
	if changes := plan.Plan(in); len(changes) == 0 {
		t.Fatal("width planning leaves a load layout alone: the target would not be needed")
	}
	in.Target = layout
	if changes := plan.Plan(in); len(changes) != 0 {
		t.Fatalf("the plan moves the load layout it holds to: %v", whats(changes))
	}
	in.Target = []assign.Slice{sl("t", 0, 0, 2*eighth, "a"), sl("t", 0, 2*eighth, ledger.HashSpace, "b")}
	changes := plan.Plan(in)
	if len(changes) != 1 || !strings.HasPrefix(changes[0].What, "revoke") {
		t.Fatalf("moving to a new target: %v, want one revoke", whats(changes))
	}
}

// TestLoadBalancerTidies: a fragmented layout (a join placed by load) is
// tidied into one span per member once the group is still and the reports
// describe it, even when the gain is below LoadMinGain.
func TestLoadBalancerTidies(t *testing.T) {
	t.Parallel()
	tp := tpOf("t", 0)
	parts := []assign.PartitionWeight{{TopicPartition: tp}}
	members := []assign.MemberWeight{mw("a", 1), mw("b", 1), mw("c", 1)}
	truth := skew{parts: map[assign.TopicPartition][64]float64{tp: front(8, 0.8, 10)}}
	two := assign.Assign(parts, members[:2], nil)
	balanced := assign.BalanceByLoad(parts, members[:2], two, truth.reportsOf(two), 1.25).Want
	joined := assign.StickyByLoad(parts, members, balanced, truth.reportsOf(balanced), nil)
	if !fragmented(joined, 1, 3) {
		t.Fatalf("the join is not fragmented, nothing to tidy: %v", joined)
	}
	snap := groupOf(joined, 10, "a", "b", "c")
	reports := truth.reportsOf(joined)
	snap.Loads = map[string]schema.ReceivedLoad{}
	t0 := time.Now()
	for _, id := range []string{"a", "b", "c"} {
		var rls []assign.RangeLoad
		for _, s := range joined {
			if s.Owner == id {
				rls = append(rls, reports[assign.RangeKey{TP: tp, Lo: s.Range.Lo, Hi: s.Range.Hi}])
			}
		}
		snap.Loads[id] = schema.ReceivedLoad{Rev: 20, Arrived: t0.Add(time.Second), Report: schema.LoadReport{Member: id, Ranges: rls}}
	}
	b, logs := testBalancer(t)
	b.cfg.LoadMinGain = 100 // no gain is enough: only tidying moves
	b.rested(snap, 0, t0)
	got := b.judge(snap, parts, members, true, t0.Add(2*time.Second))
	if got == nil || !strings.Contains(logs.String(), "tidying the load layout") {
		t.Fatalf("fragmented load layout not tidied\n%s", logs.String())
	}
	if fragmented(got, 1, 3) {
		t.Fatalf("tidied layout still fragmented: %v", got)
	}
	if err := checkCover(parts, members, got); err != nil {
		t.Fatal(err)
	}
}
