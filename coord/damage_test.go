package coord_test

import (
	"testing"
	"time"

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

var _ = coord.MaxWeight
