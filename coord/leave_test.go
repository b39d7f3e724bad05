package coord_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/testutil"
)

// TestLeaveReleasesUnasked: a member that leaves drains and releases its
// ranges without the leader revoking them. No record of the leaver is ever
// written revoking; each of its ranges is released by it once and then
// handed to the other member; no hash is gained before its release; and
// WaitReleased returns once everything is handed off.
func TestLeaveReleasesUnasked(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 8}
	var (
		allMu sync.Mutex
		all   []event
	)
	a := startOwner(t, e.Endpoints, "a", counts, 0, &all, &allMu)
	waitFor(t, "a leads and owns", 30*time.Second, func() bool { return a.IsLeader() && settled(snapshot(t, cli)) })
	b := startOwner(t, e.Endpoints, "b", counts, 0, &all, &allMu)
	waitFor(t, "a and b settle", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("b")) > 0
	})
	before := snapshot(t, cli)
	held := len(before.Owned("b"))

	ranges := cli.Watch(t.Context(), schema.Ranges(), clientv3.WithPrefix(), clientv3.WithRev(before.Rev+1))
	if err := b.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitReleased(t.Context()); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, cli)
	if !settled(after) || len(after.Owned("b")) > 0 || len(after.Owned("a")) == 0 {
		t.Fatalf("WaitReleased returned before a held everything: %+v", after.Ranges)
	}
	checkCoverage(t, after, counts)

	released := 0
	for seen := before.Rev; seen < after.Rev; {
		wr := <-ranges
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			seen = max(seen, ev.Kv.ModRevision)
			var rec coord.RangeRecord
			if ev.Type != clientv3.EventTypePut || json.Unmarshal(ev.Kv.Value, &rec) != nil || rec.Owner != "b" {
				continue
			}
			switch rec.State {
			case coord.StateRevoking:
				t.Errorf("revision %d: the leader revoked %s/%d %s from the leaving member", ev.Kv.ModRevision, rec.Topic, rec.Partition, rec.Range())
			case coord.StateReleased:
				released++
			}
		}
	}
	if released != held {
		t.Errorf("the leaving member released %d ranges, want the %d it held, each once", released, held)
	}
	allMu.Lock()
	defer allMu.Unlock()
	checkHandoffOrder(t, all)
}
