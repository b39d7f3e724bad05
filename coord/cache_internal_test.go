package coord

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestCacheMemberRevision: the leader debounces a member joining and a
// registration going, not a member turning Leaving (it releases its ranges
// itself, and the leader hands each off as it arrives), which still wakes
// an assignment round at once.
func TestCacheMemberRevision(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	cli := testutil.NewEtcdClient(t, e.Endpoints)
	keys := schema.Group{Prefix: "/keyshare", Name: "g"}.Keys()
	c := newGroupCache(cli, keys, hclog.NewNullLogger())
	go c.run(t.Context())

	lease, err := cli.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	register := func(leaving bool) int64 {
		t.Helper()
		v := mustJSON(schema.MemberInfo{V: recordVersion, ID: "m1", Started: time.Now().UTC(), Weight: 1, Leaving: leaving})
		resp, err := cli.Put(t.Context(), keys.Member("m1"), v, clientv3.WithLease(lease.ID))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	seen := func(rev int64) {
		t.Helper()
		if !c.waitRev(t.Context(), rev) {
			t.Fatalf("cache never reached revision %d", rev)
		}
	}

	joined := register(false)
	seen(joined)
	if got := c.memberRevision(); got != joined {
		t.Fatalf("after a join: member revision %d, want the join's %d", got, joined)
	}

	leaving := register(true)
	seen(leaving)
	if got := c.memberRevision(); got != joined {
		t.Fatalf("after the member turned Leaving: member revision %d, want still the join's %d (no debounce)", got, joined)
	}
	if got := c.assignRevision(); got != leaving {
		t.Fatalf("after the member turned Leaving: assignment revision %d, want %d (a round at once)", got, leaving)
	}

	del, err := cli.Delete(t.Context(), keys.Member("m1"))
	if err != nil {
		t.Fatal(err)
	}
	gone := del.Header.Revision
	seen(gone)
	if got := c.memberRevision(); got != gone {
		t.Fatalf("after the registration went: member revision %d, want %d", got, gone)
	}
}
