package coord_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/testutil"
)

// manyMembers is one more than a transaction of etcd's default
// --max-txn-ops (128) can reassign in one change: one partition split 65
// ways, and a crash splits the dead member's range into 64 pieces of two
// writes each.
const manyMembers = 65

// joinShared starts a member on a shared client (65 members each with their
// own connection would only load the machine), closed when the test ends.
func joinShared(t *testing.T, cli *clientv3.Client, cfg coord.Config) *coord.Session {
	t.Helper()
	s, err := coord.Join(t.Context(), cli, cfg)
	if err != nil {
		t.Fatalf("join %s: %v", cfg.MemberID, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// manyConfig is testConfig with a longer session TTL: 65 members under
// -race on a small, shared machine have missed 15 s of keepalives. A crash revokes the
// lease, so the TTL does not slow the tests.
func manyConfig(t *testing.T, id string, counts map[string]int32) coord.Config {
	cfg := testConfig(t, id, counts)
	cfg.SessionTTL = 60 * time.Second
	return cfg
}

// TestManyMembersOnePartition: the first assignment of a partition shared
// by 65 members fills its hash space with 65 ranges, more than one etcd
// transaction may hold; it must still be written. Then one member crashes:
// its range is split into 64 pieces, again more than one transaction holds,
// and must still be reassigned.
func TestManyMembersOnePartition(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	var ready atomic.Bool // the topic is unknown until every member joined
	source := func(_ context.Context, topics []string) (map[string]int32, error) {
		if !ready.Load() {
			return map[string]int32{}, nil
		}
		return counts, nil
	}
	shared := testutil.NewEtcdClient(t, e.Endpoints)
	var members []*coord.Session
	for i := range manyMembers {
		cfg := manyConfig(t, fmt.Sprintf("m%02d", i), counts)
		cfg.Partitions = source
		cfg.PartitionRefresh = 100 * time.Millisecond
		members = append(members, joinShared(t, shared, cfg))
	}
	waitFor(t, "every member registered", 30*time.Second, func() bool { return len(snapshot(t, cli).Members) == manyMembers })
	ready.Store(true)
	waitFor(t, "every member to own a range", 60*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Ranges) == manyMembers
	})
	checkCoverage(t, snapshot(t, cli), counts)

	// A member that does not lead crashes: its lease ends, it never leaves.
	victim := members[manyMembers-1]
	if victim.IsLeader() {
		victim = members[manyMembers-2]
	}
	_ = victim.Close()
	waitFor(t, fmt.Sprintf("%s's range to be reassigned", victim.ID()), 60*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned(victim.ID())) == 0
	})
	checkCoverage(t, snapshot(t, cli), counts)
}
