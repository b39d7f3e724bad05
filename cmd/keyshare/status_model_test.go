package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

func ptr[T any](v T) *T { return &v }

// TestSplitLag: the parts of end − committed sum to it exactly, also when
// the readings are out of order or unknown.
func TestSplitLag(t *testing.T) {
	for _, tc := range []struct {
		name           string
		committed, end int64
		safe, fetched  *int64
		want           lagParts
		ok             bool
	}{
		// The case: 63 of lag, 47 of them behind the committed offset.
		{"in order", 100, 163, ptr[int64](147), ptr[int64](157), lagParts{Uncommitted: 47, Waiting: 10, Unfetched: 6}, true},
		{"all committed", 100, 100, ptr[int64](100), ptr[int64](100), lagParts{}, false},
		{"committed past end", 120, 100, nil, nil, lagParts{}, false},
		{"no ledger yet", 0, 50, nil, nil, lagParts{Unfetched: 50}, true},
		{"safe below committed", 100, 130, ptr[int64](90), ptr[int64](120), lagParts{Waiting: 20, Unfetched: 10}, true},
		{"fetched past end", 100, 130, ptr[int64](110), ptr[int64](140), lagParts{Uncommitted: 10, Waiting: 20}, true},
		{"safe past end", 100, 130, ptr[int64](150), ptr[int64](150), lagParts{Uncommitted: 30}, true},
		{"fetched unknown", 100, 130, ptr[int64](110), nil, lagParts{Uncommitted: 10, Unfetched: 20}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := splitLag(tc.committed, tc.safe, tc.fetched, tc.end)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("splitLag = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
			if ok && got.Sum() != tc.end-tc.committed {
				t.Fatalf("parts sum to %d, lag is %d", got.Sum(), tc.end-tc.committed)
			}
		})
	}
}

// TestLagLine: a paused group's lag is blamed on the pause, not on an
// unfinished record; the line's numbers are the parts.
func TestLagLine(t *testing.T) {
	parts := lagParts{Uncommitted: 47, Waiting: 10, Unfetched: 6}
	got := lagLine(63, parts, 2, ptr[int64](147), false)
	want := "lag 63 = 47 handled, recorded in etcd, not yet committed to Kafka + 10 fetched, held back by the unfinished record at offset 147 (2 pending) + 6 not yet fetched"
	if got != want {
		t.Errorf("running:\n got %s\nwant %s", got, want)
	}
	got = lagLine(63, parts, 2, ptr[int64](147), true)
	if strings.Contains(got, "unfinished") || !strings.Contains(got, "+ 10 fetched, not handled: the group is paused +") {
		t.Errorf("paused: %s", got)
	}
}

// TestGroupState: the state line from members, ranges and the pause.
func TestGroupState(t *testing.T) {
	active := rangeStatus{Owner: "a", State: schema.StateActive}
	gone := rangeStatus{Owner: "x", State: schema.StateActive, OwnerGone: true}
	revoking := rangeStatus{Owner: "a", State: schema.StateRevoking, Target: "b"}
	parts := func(rs ...rangeStatus) []partitionStatus { return []partitionStatus{{Topic: "t", Ranges: rs}} }
	a, b := memberStatus{ID: "a"}, memberStatus{ID: "b"}
	for _, tc := range []struct {
		name       string
		paused     bool
		members    []memberStatus
		parts      []partitionStatus
		state, why string
	}{
		{"stable", false, []memberStatus{a}, parts(active), groupStable, "every range active under a live member"},
		{"paused wins", true, nil, parts(gone), groupPaused, "members take no records"},
		{"empty with ranges", false, nil, parts(gone, gone), groupEmpty, "no member registered; 2 ranges waiting for one"},
		{"empty new group", false, nil, nil, groupEmpty, "no member registered"},
		{"gone owner", false, []memberStatus{a}, parts(active, gone), groupRebalancing, "1 range under an owner that is gone"},
		{"handoff and leaving", false, []memberStatus{{ID: "a", Leaving: true}, b}, parts(revoking), groupRebalancing, "1 range being handed over, 1 member leaving"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, why := groupState(tc.paused, tc.members, tc.parts)
			if s != tc.state || why != tc.why {
				t.Fatalf("groupState = %q (%s); want %q (%s)", s, why, tc.state, tc.why)
			}
			// The one rule: group list and describe (admin.StateOf) say the same.
			members := make(map[string]schema.Member)
			for _, m := range tc.members {
				members[m.ID] = schema.Member{MemberInfo: schema.MemberInfo{ID: m.ID, Leaving: m.Leaving}}
			}
			var ranges []schema.RangeState
			for _, p := range tc.parts {
				for _, r := range p.Ranges {
					ranges = append(ranges, schema.RangeState{Record: schema.RangeRecord{Topic: p.Topic, Owner: r.Owner, State: r.State}})
				}
			}
			if a := admin.StateOf(tc.paused, members, ranges); string(a) != s {
				t.Fatalf("admin.StateOf = %q, groupState = %q: the two must agree", a, s)
			}
		})
	}
}

// TestLoadRates: records/s summed by member and by partition.
func TestLoadRates(t *testing.T) {
	rl := func(topic string, p int32, rps float64) assign.RangeLoad {
		return assign.RangeLoad{Topic: topic, Partition: p, Lo: 0, Hi: 1, RecordsPerSec: rps}
	}
	byMember, byTP := loadRates([]schema.LoadReport{
		{Member: "a", Ranges: []assign.RangeLoad{rl("t", 0, 10), rl("t", 1, 5)}},
		{Member: "b", Ranges: []assign.RangeLoad{rl("t", 0, 2.5)}},
		{Member: "idle"},
	})
	if byMember["a"] != 15 || byMember["b"] != 2.5 || len(byMember) != 3 {
		t.Errorf("by member = %v", byMember)
	}
	if v, ok := byMember["idle"]; !ok || v != 0 {
		t.Errorf("idle member = %v, %v; want 0, true", v, ok)
	}
	if byTP[assign.TopicPartition{Topic: "t", Partition: 0}] != 12.5 || byTP[assign.TopicPartition{Topic: "t", Partition: 1}] != 5 {
		t.Errorf("by partition = %v", byTP)
	}
}

// TestMarkClock: a watermark's age is known from the refresh that saw it
// move; one unchanged since the first refresh has none; an owner's stuck
// report wins.
func TestMarkClock(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	frame := func(at time.Time, w int64, since *time.Time) *groupStatus {
		return &groupStatus{At: at, Partitions: []partitionStatus{{Topic: "t", Ranges: []rangeStatus{{Lo: 0, Watermark: &w, WatermarkSince: since}}}}}
	}
	since := func(st *groupStatus) *time.Time { return st.Partitions[0].Ranges[0].WatermarkSince }
	mc := markClock{}
	if s := since(frame(t0, 10, nil)); s != nil {
		t.Fatal("unstamped frame has a time")
	}
	st := frame(t0, 10, nil)
	mc.stamp(st)
	if since(st) != nil {
		t.Errorf("first sight: since %v, want unknown", since(st))
	}
	st = frame(t0.Add(time.Second), 10, nil)
	mc.stamp(st)
	if since(st) != nil {
		t.Errorf("unchanged since first sight: since %v, want unknown", since(st))
	}
	st = frame(t0.Add(2*time.Second), 20, nil)
	mc.stamp(st)
	if s := since(st); s == nil || !s.Equal(t0.Add(2*time.Second)) {
		t.Errorf("moved: since %v, want %v", s, t0.Add(2*time.Second))
	}
	st = frame(t0.Add(5*time.Second), 20, nil)
	mc.stamp(st)
	if s := since(st); s == nil || !s.Equal(t0.Add(2*time.Second)) {
		t.Errorf("held: since %v, want %v", s, t0.Add(2*time.Second))
	}
	stuck := t0.Add(-time.Hour)
	st = frame(t0.Add(6*time.Second), 20, &stuck)
	mc.stamp(st)
	if s := since(st); !s.Equal(stuck) {
		t.Errorf("stuck report: since %v, want %v", s, stuck)
	}
	mc.stamp(&groupStatus{})
	if len(mc) != 0 {
		t.Errorf("ranges gone, clock keeps %v", mc)
	}
}

// TestLagTrend: lag change per second between two reads, for partitions
// with a lag in both.
func TestLagTrend(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	read := func(at time.Time, lags map[int32]*int64) *groupStatus {
		st := &groupStatus{At: at}
		for p := int32(0); p < 3; p++ {
			st.Partitions = append(st.Partitions, partitionStatus{Topic: "t", Partition: p, Lag: lags[p]})
		}
		return st
	}
	prev := read(t0, map[int32]*int64{0: ptr[int64](100), 1: ptr[int64](50)})
	cur := read(t0.Add(2*time.Second), map[int32]*int64{0: ptr[int64](80), 1: nil, 2: ptr[int64](7)})
	lagTrend(prev, cur)
	if p := cur.Partitions[0].LagPerSec; p == nil || *p != -10 {
		t.Errorf("t/0: %v, want -10/s", p)
	}
	if cur.Partitions[1].LagPerSec != nil || cur.Partitions[2].LagPerSec != nil {
		t.Errorf("t/1, t/2 without two lags: %v, %v", cur.Partitions[1].LagPerSec, cur.Partitions[2].LagPerSec)
	}
	same := read(t0, map[int32]*int64{0: ptr[int64](90)})
	lagTrend(prev, same)
	if same.Partitions[0].LagPerSec != nil {
		t.Errorf("reads at one instant: %v", *same.Partitions[0].LagPerSec)
	}
}

// TestHotKeysOf: each reported range's notable hot keys get their names
// from the same member's names, by partition and hash; a hash the member
// named in another partition, or another member's name for it, is not
// taken; a hash without a name keeps a nil key; the share is of the
// range's busy time; a key with too little of it (hash 11) is left out.
func TestHotKeysOf(t *testing.T) {
	reports := []schema.LoadReport{
		{Member: "m1", Ranges: []assign.RangeLoad{
			{Topic: "t", Partition: 0, Lo: 0, Hi: 100, BusyPerSec: 0.8, Hot: []assign.HotKey{{Hash: 7, BusyPerSec: 0.6}, {Hash: 9, BusyPerSec: 0.1}, {Hash: 11, BusyPerSec: 0.001}}},
			{Topic: "t", Partition: 1, Lo: 0, Hi: 100, BusyPerSec: 0, Hot: nil},
		}},
		{Member: "m2", Ranges: []assign.RangeLoad{
			{Topic: "t", Partition: 0, Lo: 100, Hi: 200, BusyPerSec: 0.5, Hot: []assign.HotKey{{Hash: 150, BusyPerSec: 0.5}}},
		}},
	}
	names := map[string]schema.HotKeyNames{
		"m1": {Member: "m1", Keys: []schema.HotKeyName{{Topic: "t", Partition: 0, Hash: 7, Key: "acct-42"}, {Topic: "t", Partition: 1, Hash: 9, Key: "elsewhere"}}},
		"m3": {Member: "m3", Keys: []schema.HotKeyName{{Topic: "t", Partition: 0, Hash: 150, Key: "not m2's"}}},
	}
	got := hotKeysOf(reports, names)
	m1 := got[reportedRange{"m1", "t", 0, 0, 100}]
	if len(m1) != 2 || m1[0].Key == nil || *m1[0].Key != "acct-42" || math.Abs(m1[0].Share-0.75) > 1e-9 || m1[1].Key != nil || m1[1].Hash != 9 {
		t.Errorf("m1's range: %+v; want acct-42 at 75%%, then hash 9 without a name", m1)
	}
	if m2 := got[reportedRange{"m2", "t", 0, 100, 200}]; len(m2) != 1 || m2[0].Key != nil || m2[0].Share != 1 {
		t.Errorf("m2's range: %+v; want hash 150 without a name, all of the range", m2)
	}
	if n := len(got); n != 2 {
		t.Errorf("%d ranges with hot keys, want 2: %+v", n, got)
	}
}
