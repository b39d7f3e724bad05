package coord_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/coord"
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
	logs := &syncBuffer{}
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
	var goneBefore []coord.RangeState
	for _, r := range snapshot(t, cli).Ranges {
		if r.Record.Topic == "gone" {
			goneBefore = append(goneBefore, r)
		}
	}
	_ = b.Close() // b crashes (its lease is revoked; it does not leave)
	waitFor(t, "b's ranges of topic ok to go to a", 30*time.Second, func() bool {
		for _, r := range snapshot(t, cli).Ranges {
			if r.Record.Topic == "ok" && (r.Record.Owner != "a" || r.Record.State != coord.StateActive) {
				return false
			}
		}
		return true
	})
	var goneAfter []coord.RangeState
	for _, r := range snapshot(t, cli).Ranges {
		if r.Record.Topic == "gone" {
			goneAfter = append(goneAfter, r)
		}
	}
	if !slices.EqualFunc(goneBefore, goneAfter, func(x, y coord.RangeState) bool { return x.Key == y.Key && x.Rev == y.Rev }) {
		t.Fatalf("ranges of the missing topic changed:\n%v\n%v", goneBefore, goneAfter)
	}
	if n := strings.Count(logs.String(), "topics=[gone]"); n != 1 {
		t.Errorf("missing topic reported %d times, want once", n)
	}
}
