package coord_test

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/testutil"
)

// TestGraceOutlivesReregistration: x's session ends (its lease revoked,
// as etcd would expire it while x's process is cut off, its handlers
// perhaps still running), and another process registers under the same id
// at once, before the leader may have seen the gap. The new registration
// must not work on the ranges of the old one before FailoverGrace has
// passed: its grace belongs to the registration that went, not to the id.
func TestGraceOutlivesReregistration(t *testing.T) {
	t.Parallel()
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 2}
	const grace = 2 * time.Second
	lcfg := testConfig(t, "l", counts)
	lcfg.FailoverGrace = grace
	l, _ := join(t, e.Endpoints, lcfg)
	waitFor(t, "l leads", 30*time.Second, l.IsLeader)
	join(t, e.Endpoints, testConfig(t, "x", counts))
	waitFor(t, "both own ranges", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("l")) > 0 && len(snap.Owned("x")) > 0
	})

	resp, err := cli.Get(t.Context(), "/keyshare/g/members/x")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get x's registration: %v %v", resp, err)
	}
	ended := time.Now()
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	x2, _ := join(t, e.Endpoints, testConfig(t, "x", counts))
	deadline := time.After(30 * time.Second)
	for {
		select {
		case a := <-x2.Updates():
			if len(a.Ranges) == 0 {
				continue
			}
			if took := time.Since(ended); took < grace {
				t.Fatalf("x's new registration got %d ranges %s after the old one ended; want them no sooner than FailoverGrace (%s)", len(a.Ranges), took.Round(time.Millisecond), grace)
			}
			return
		case <-deadline:
			t.Fatal("x's new registration got no range within 30 s")
		}
	}
}
