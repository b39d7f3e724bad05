package coord

import (
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/state"
	"github.com/keyshare/keyshare/testutil"
)

// TestCacheMemberRevision: the leader debounces a member joining and a
// registration going, not a member turning Leaving (it releases its ranges
// itself, and the leader hands each off as it arrives), which still wakes
// an assignment round at once.
func TestCacheMemberRevision(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	cli := testutil.NewEtcdClient(t, e.Endpoints)
	schema := keys.New("/keyshare", "g")
	c := newGroupCache(cli, schema, hclog.NewNullLogger())
	go c.run(t.Context())

	lease, err := cli.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	register := func(leaving bool) int64 {
		t.Helper()
		v := mustJSON(state.MemberInfo{V: recordVersion, ID: "m1", Started: time.Now().UTC(), Weight: 1, Leaving: leaving})
		resp, err := cli.Put(t.Context(), schema.Member("m1"), v, clientv3.WithLease(lease.ID))
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

	del, err := cli.Delete(t.Context(), schema.Member("m1"))
	if err != nil {
		t.Fatal(err)
	}
	gone := del.Header.Revision
	seen(gone)
	if got := c.memberRevision(); got != gone {
		t.Fatalf("after the registration went: member revision %d, want %d", got, gone)
	}
}

// TestCacheLeavesOutHotKeyNames: a member's hot key names, beside its load
// report under load/, are neither read as a report nor as a bad one (which
// the leader would warn about), whether read at the start or watched.
func TestCacheLeavesOutHotKeyNames(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	cli := testutil.NewEtcdClient(t, e.Endpoints)
	schema := keys.New("/keyshare", "g")
	lease, err := cli.Grant(t.Context(), 30)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, value string) int64 {
		t.Helper()
		resp, err := cli.Put(t.Context(), key, value, clientv3.WithLease(lease.ID))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	report := func(id string) string {
		return mustJSON(state.LoadReport{V: recordVersion, Member: id, At: time.Now().UTC(), Window: 5})
	}
	names := func(id string) string {
		return mustJSON(state.HotKeyNames{V: recordVersion, Member: id, Keys: []state.HotKeyName{{Topic: "t", Partition: 0, Hash: 7, Key: "acct-42"}}})
	}
	for _, id := range []string{"m1", "m2"} {
		put(schema.Member(id), mustJSON(state.MemberInfo{V: recordVersion, ID: id, Started: time.Now().UTC(), Weight: 1}))
	}
	put(schema.Load("m1"), report("m1"))
	put(schema.HotKeys("m1"), names("m1")) // read at the start

	c := newGroupCache(cli, schema, hclog.NewNullLogger())
	go c.run(t.Context())
	put(schema.Load("m2"), report("m2"))
	rev := put(schema.HotKeys("m2"), names("m2")) // watched
	if !c.waitRev(t.Context(), rev) {
		t.Fatalf("cache never reached revision %d", rev)
	}
	snap, err := c.snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Loads) != 2 || len(snap.BadLoads) != 0 {
		t.Fatalf("loads %v, bad loads %v: want m1's and m2's reports and nothing bad", snap.Loads, snap.BadLoads)
	}
}
