package coord_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestLeavePlannedWhileKafkaReadHangs: the leader reads partition counts
// from Kafka every PartitionRefresh. While such a read hangs, a member's
// leave is still planned at once: its ranges go straight to the other
// member and WaitReleased returns. When the assignment loop made the read
// itself, the round that reacted to the leave waited for it (30 s here),
// and the leaver's ranges lay released until then.
func TestLeavePlannedWhileKafkaReadHangs(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 8}
	var (
		hang    atomic.Bool
		entered = make(chan struct{})
		once    sync.Once
	)
	cfg := testConfig(t, "a", counts)
	cfg.PartitionRefresh = 50 * time.Millisecond
	counted := static(counts)
	cfg.Partitions = func(ctx context.Context, topics []string) (map[string]int32, error) {
		if hang.Load() {
			once.Do(func() { close(entered) })
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return counted(ctx, topics)
	}
	var (
		allMu sync.Mutex
		all   []event
	)
	a := startOwnerWith(t, e.Endpoints, cfg, 0, &all, &allMu)
	waitFor(t, "a leads and owns", 30*time.Second, func() bool { return a.IsLeader() && settled(snapshot(t, cli)) })
	b := startOwner(t, e.Endpoints, "b", counts, 0, &all, &allMu)
	waitFor(t, "a and b settle", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("b")) > 0
	})

	hang.Store(true)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the leader did not read partition counts again within 10 s")
	}
	if err := b.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.WaitReleased(ctx); err != nil {
		t.Fatalf("b still holds ranges 10 s after leaving while the leader's Kafka read hangs: %v", err)
	}
	after := snapshot(t, cli)
	if len(after.Owned("b")) > 0 || !settled(after) {
		t.Fatalf("after the leave: %+v", after.Ranges)
	}
	checkCoverage(t, after, counts)
}
