package admin_test

import (
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/testutil"
)

// TestDeleteRefusesANestedRoot writes a live group's keys raw, as etcdctl
// would, then asks to delete groups whose roots lie inside it or hold it.
// Each delete is refused naming the other group's keys, and every key
// stays: a prefix/group pair cannot reach past a live group's member check.
func TestDeleteRefusesANestedRoot(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)
	ctx := t.Context()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]string{
		"/keyshare/g/members/m1":                         `{"v":1}`,
		"/keyshare/g/generation":                         `{"v":1,"generation":3}`,
		"/keyshare/g/ledger/orders/00000/0000000000":     `{"v":1,"next":5}`,
		"/keyshare/g/ledger/ranges/00000/0000000000":     `{"v":1,"next":5}`, // a topic named "ranges"
		"/keyshare/g/ranges/orders/00000/0000000000":     `{"v":1}`,
		"/keyshare/g/commits/orders/00000":               `{"v":1,"offset":5}`,
		"/keyshare/other/ledger/orders/00000/0000000000": `{"v":1,"next":9}`,
	}
	for k, v := range live {
		var opts []clientv3.OpOption
		if k == "/keyshare/g/members/m1" {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		if _, err := cli.Put(ctx, k, v, opts...); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct{ prefix, group string }{
		{"/keyshare/g", "ledger"},        // inside g: its ledger
		{"/keyshare/g/ledger", "ranges"}, // inside g, and its keys look like a group's
		{"/", "keyshare"},                // holds g and other
		{"/keyshare/g", "members"},       // g's registrations
	} {
		g, err := admin.Open(cli, nil, tt.prefix, tt.group)
		if err != nil {
			t.Fatal(err)
		}
		err = g.Delete(ctx, false)
		if !errors.Is(err, coord.ErrNotGroupRoot) {
			t.Errorf("delete --prefix %s --group %s: got %v, want ErrNotGroupRoot", tt.prefix, tt.group, err)
		} else {
			t.Logf("delete --prefix %s --group %s: %v", tt.prefix, tt.group, err)
		}
	}
	resp, err := cli.Get(ctx, "/keyshare/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != int64(len(live)) {
		t.Fatalf("%d keys left under /keyshare/, want all %d", resp.Count, len(live))
	}

	// The group that is one group's alone is still deleted once its
	// member is gone.
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	g, err := admin.Open(cli, nil, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Delete(ctx, false); err != nil {
		t.Fatalf("delete of a group's own root: %v", err)
	}
	resp, err = cli.Get(ctx, "/keyshare/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 {
		t.Fatalf("%d keys left under /keyshare/ after deleting g, want other's 1", resp.Count)
	}
}

// TestDeleteRefusedWhileLiveReadsNaturally: the refusal of a delete while
// members run names the group, then its members, then what to do, and
// still matches ErrLiveMembers.
func TestDeleteRefusedWhileLiveReadsNaturally(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)
	ctx := t.Context()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		rec := `{"v":1,"id":"` + id + `","host":"h","pid":1,"started":"2026-01-02T15:04:05Z","weight":1}`
		if _, err := cli.Put(ctx, "/keyshare/demo/members/"+id, rec, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	g, err := admin.Open(cli, nil, "/keyshare", "demo")
	if err != nil {
		t.Fatal(err)
	}
	err = g.Delete(ctx, false)
	want := `admin: group "demo" has live members: a, b (stop them first; a member killed without leaving is gone once its lease expires); nothing was changed`
	if !errors.Is(err, admin.ErrLiveMembers) || err.Error() != want {
		t.Fatalf("delete while live: %v\nwant %s (and errors.Is ErrLiveMembers)", err, want)
	}
}
