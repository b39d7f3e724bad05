package coord_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestLeaveReleasesUnasked: a member that leaves drains and gives up its
// ranges without the leader revoking them. No record of the leaver is ever
// written revoking; each of its ranges is written once more while it owns
// it, active for the other member (the leader's handoff plan, handoff.go),
// not released and then handed off; no hash is gained before its release;
// and WaitReleased returns once everything is handed off.
func TestLeaveReleasesUnasked(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 8}
	var (
		allMu sync.Mutex
		all   []event
	)
	a := startOwner(t, e.Endpoints, "a", counts, 0, &all, &allMu)
	waitFor(t, "a leads and owns", 30*time.Second, func() bool { return a.IsLeader() && settled(snapshot(t, cli)) })
	// b gives up a range 300 ms after it sees it revoking, so that the
	// leader's handoff plan is there when it does.
	b := startOwner(t, e.Endpoints, "b", counts, 300*time.Millisecond, &all, &allMu)
	waitFor(t, "a and b settle", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("b")) > 0
	})
	before := snapshot(t, cli)
	held := len(before.Owned("b"))

	ranges := cli.Watch(t.Context(), testKeys.Ranges(), clientv3.WithPrefix(), clientv3.WithRev(before.Rev+1), clientv3.WithPrevKV())
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

	released, handed := 0, make(map[string]int)
	for seen := before.Rev; seen < after.Rev; {
		wr := <-ranges
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range wr.Events {
			seen = max(seen, ev.Kv.ModRevision)
			var rec, prev schema.RangeRecord
			if ev.Type != clientv3.EventTypePut || json.Unmarshal(ev.Kv.Value, &rec) != nil {
				continue
			}
			if ev.PrevKv != nil && json.Unmarshal(ev.PrevKv.Value, &prev) == nil && prev.Owner == "b" && prev.State == schema.StateActive && rec.Owner != "b" {
				if rec.State != schema.StateActive {
					t.Errorf("revision %d: %s/%d %s handed to %s as %s", ev.Kv.ModRevision, rec.Topic, rec.Partition, rec.Range(), rec.Owner, rec.State)
				}
				handed[string(ev.Kv.Key)]++
			}
			if rec.Owner != "b" {
				continue
			}
			switch rec.State {
			case schema.StateRevoking:
				t.Errorf("revision %d: the leader revoked %s/%d %s from the leaving member", ev.Kv.ModRevision, rec.Topic, rec.Partition, rec.Range())
			case schema.StateReleased:
				released++
			}
		}
	}
	if released != 0 || len(handed) != held {
		t.Errorf("the leaving member released %d ranges and handed %d on directly; want the %d it held handed on, none released", released, len(handed), held)
	}
	for k, n := range handed {
		if n != 1 {
			t.Errorf("%s handed on %d times, want once", k, n)
		}
	}
	allMu.Lock()
	defer allMu.Unlock()
	checkHandoffOrder(t, all)
}

// TestWaitReleasedSeesLateGift: a leader planning on a snapshot from before
// a member's leave can give it a range after it left; WaitReleased must not
// return while etcd holds such a range that the member's watch has not
// delivered yet. The member's watch of the range records is held back, and
// the gift is written while it is.
func TestWaitReleasedSeesLateGift(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 4}
	var (
		allMu sync.Mutex
		all   []event
	)
	a := startOwner(t, e.Endpoints, "a", counts, 0, &all, &allMu)
	waitFor(t, "a leads and owns", 30*time.Second, func() bool { return a.IsLeader() && settled(snapshot(t, cli)) })

	bcli := testutil.NewEtcdClient(t, e.Endpoints)
	gate := &gatedWatcher{Watcher: bcli.Watcher, prefix: testKeys.Ranges()}
	bcli.Watcher = gate
	b, err := coord.Join(t.Context(), bcli, testConfig(t, "b", counts))
	if err != nil {
		t.Fatal(err)
	}
	o := &owner{s: b}
	done := make(chan struct{})
	go func() { defer close(done); o.run(t, &all, &allMu) }()
	t.Cleanup(func() { _ = b.Close(); <-done })
	waitFor(t, "a and b settle", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("b")) > 0
	})
	if err := b.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitReleased(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The late gift: one of a's ranges, written owned by b while b's watch
	// of the range records is held.
	gate.hold()
	snap := snapshot(t, cli)
	gift := snap.Owned("a")[0]
	rec := gift.Record
	rec.Owner = "b"
	resp, err := cli.Txn(t.Context()).If(clientv3.Compare(clientv3.ModRevision(gift.Key), "=", gift.Rev)).Then(clientv3.OpPut(gift.Key, mustJSON(t, rec))).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("write the gift: %v (succeeded %v)", err, resp != nil && resp.Succeeded)
	}
	time.AfterFunc(time.Second, gate.release)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := b.WaitReleased(ctx); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, cli)
	if owned := after.Owned("b"); len(owned) > 0 {
		t.Fatalf("WaitReleased returned while etcd holds %d ranges of b, first %s", len(owned), owned[0].Key)
	}
	if !gate.released() {
		t.Fatal("WaitReleased returned while b's watch was held: it did not wait for etcd's current revision")
	}
}

// gatedWatcher holds back the responses of watches on prefix while it is
// held: a member whose watch lags behind etcd.
type gatedWatcher struct {
	clientv3.Watcher
	prefix string

	mu   sync.Mutex
	gate chan struct{} // closed when not held; nil until first held
	held bool
}

func (w *gatedWatcher) hold() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.gate, w.held = make(chan struct{}), true
}

func (w *gatedWatcher) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held {
		close(w.gate)
		w.held = false
	}
}

func (w *gatedWatcher) released() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gate != nil && !w.held
}

func (w *gatedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	in := w.Watcher.Watch(ctx, key, opts...)
	if key != w.prefix {
		return in
	}
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for wr := range in {
			w.mu.Lock()
			gate, held := w.gate, w.held
			w.mu.Unlock()
			if held {
				select {
				case <-gate:
				case <-ctx.Done():
					return
				}
			}
			select {
			case out <- wr:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
