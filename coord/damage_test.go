package coord_test

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestLeaselessMemberIgnored: a members/ key written without a lease (by
// hand, or by a tool) belongs to no session, so it would keep its ranges
// forever. It is a damaged value: not a live member, and the leader deletes
// it; its ranges go to live members.
func TestLeaselessMemberIgnored(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 2}
	ghost := `{"v":1,"id":"ghost","host":"h","pid":1,"started":"2026-01-02T03:04:05Z","weight":1}`
	if _, err := cli.Put(t.Context(), "/keyshare/g/members/ghost", ghost); err != nil {
		t.Fatal(err)
	}
	join(t, e.Endpoints, testConfig(t, "a", counts))
	waitFor(t, "a to own every range and the ghost to be deleted", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		if len(snap.Ranges) == 0 || len(snap.Owned("a")) != len(snap.Ranges) || !settled(snap) {
			return false
		}
		resp, err := cli.Get(t.Context(), "/keyshare/g/members/ghost")
		return err == nil && len(resp.Kvs) == 0
	})
	checkCoverage(t, snapshot(t, cli), counts)
	if _, ok := snapshot(t, cli).Members["ghost"]; ok {
		t.Fatal("ghost still a member")
	}
}

// TestMissingTopicDoesNotFreezeOthers: when the partition source leaves one
// topic out (deleted, or not authorised), the leader still reassigns the
// ranges of the other topics; the missing topic's ranges stay as they are.
func TestMissingTopicDoesNotFreezeOthers(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"ok": 2, "gone": 2}
	var hide atomic.Bool
	source := func(_ context.Context, topics []string) (map[string]int32, error) {
		out := make(map[string]int32)
		for _, topic := range topics {
			if topic == "gone" && hide.Load() {
				continue
			}
			out[topic] = counts[topic]
		}
		return out, nil
	}
	logs := &testutil.Buffer{}
	start := func(id string) *coord.Session {
		cfg := testConfig(t, id, counts)
		cfg.Partitions = source
		cfg.PartitionRefresh = 50 * time.Millisecond
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info})
		s, _ := join(t, e.Endpoints, cfg)
		return s
	}
	a := start("a")
	waitFor(t, "a leads", 30*time.Second, a.IsLeader)
	b := start("b")
	waitFor(t, "a and b share the ranges", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("a")) > 0 && len(snap.Owned("b")) > 0
	})
	hide.Store(true)
	time.Sleep(200 * time.Millisecond) // the leader rereads the counts
	var goneBefore []schema.RangeState
	for _, r := range snapshot(t, cli).Ranges {
		if r.Record.Topic == "gone" {
			goneBefore = append(goneBefore, r)
		}
	}
	_ = b.Close() // b crashes (its lease is revoked; it does not leave)
	waitFor(t, "b's ranges of topic ok to go to a", 30*time.Second, func() bool {
		for _, r := range snapshot(t, cli).Ranges {
			if r.Record.Topic == "ok" && (r.Record.Owner != "a" || r.Record.State != schema.StateActive) {
				return false
			}
		}
		return true
	})
	var goneAfter []schema.RangeState
	for _, r := range snapshot(t, cli).Ranges {
		if r.Record.Topic == "gone" {
			goneAfter = append(goneAfter, r)
		}
	}
	if !slices.EqualFunc(goneBefore, goneAfter, func(x, y schema.RangeState) bool { return x.Key == y.Key && x.Rev == y.Rev }) {
		t.Fatalf("ranges of the missing topic changed:\n%v\n%v", goneBefore, goneAfter)
	}
	if n := strings.Count(logs.String(), "topics=[gone]"); n != 1 {
		t.Errorf("missing topic reported %d times, want once", n)
	}
}

// TestOverlappingRangeRepaired: a range record that overlaps another of its
// partition (a damaged state: the leader never writes one) must not give
// its hashes to a second member. The record that starts first wins; the
// other is reported and the leader deletes it.
func TestOverlappingRangeRepaired(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 2}
	join(t, e.Endpoints, testConfig(t, "a", counts))
	join(t, e.Endpoints, testConfig(t, "b", counts))
	var whole schema.RangeState
	waitFor(t, "a and b own a partition each", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		if !settled(snap) || len(snap.Owned("a")) != 1 || len(snap.Owned("b")) != 1 {
			return false
		}
		whole = snap.Owned("a")[0]
		return true
	})
	// b gets [100, 200) of a's whole partition.
	bad := whole.Record
	bad.Lo, bad.Hi, bad.Owner = 100, 200, "b"
	badKey := testKeys.Range(bad.Topic, bad.Partition, bad.Lo)
	if _, err := cli.Put(t.Context(), badKey, mustJSON(t, bad)); err != nil {
		t.Fatal(err)
	}
	noOverlap := func(snap *schema.Snapshot) {
		t.Helper()
		byTP := map[assign.TopicPartition][]schema.RangeState{}
		for _, id := range []string{"a", "b"} {
			for _, r := range snap.AssignmentOf(id).Ranges {
				for _, o := range byTP[r.TP()] {
					if !o.Record.Range().Intersect(r.Record.Range()).Empty() {
						t.Fatalf("rev %d: %s/%d %s of %s overlaps %s of %s", snap.Rev, r.Record.Topic, r.Record.Partition, r.Record.Range(), r.Record.Owner, o.Record.Range(), o.Record.Owner)
					}
				}
				byTP[r.TP()] = append(byTP[r.TP()], r)
			}
		}
	}
	noOverlap(snapshot(t, cli))
	waitFor(t, "the overlapping record to be deleted", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		noOverlap(snap)
		resp, err := cli.Get(t.Context(), badKey)
		return err == nil && len(resp.Kvs) == 0 && len(snap.Problems) == 0 && len(snap.Orphans) == 0 && settled(snap)
	})
	checkCoverage(t, snapshot(t, cli), counts)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
