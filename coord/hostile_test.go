package coord_test

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// Values written raw into a live group's etcd state, as etcdctl would, that
// decode cleanly but lie. Each is refused or bounded, and the group goes on.

// TestMemberIDWithSlashLeftOut: members/a/b decodes as the registration
// of member "a/b", but "a/b" can own no range (a range key names its owner
// as one path element). The leader leaves the member out with one
// warning, instead of assigning to it, calling the result damaged and
// assigning again in a loop.
func TestMemberIDWithSlashLeftOut(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 2}
	lease, err := cli.Grant(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	bad := `{"v":1,"id":"a/b","host":"h","pid":1,"started":"2026-01-02T03:04:05Z","weight":1}`
	if _, err := cli.Put(t.Context(), "/keyshare/g/members/a/b", bad, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	logs := &testutil.Buffer{}
	cfg := testConfig(t, "m", counts)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info})
	join(t, e.Endpoints, cfg)
	waitFor(t, "m to own every range", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("m")) == len(snap.Ranges)
	})
	snap := snapshot(t, cli)
	checkCoverage(t, snap, counts)
	gen := snap.Generation.Generation
	time.Sleep(time.Second) // a looping leader writes hundreds of generations a second
	if now := snapshot(t, cli).Generation.Generation; now != gen {
		t.Fatalf("generation went from %d to %d in a second with nothing changing", gen, now)
	}
	if n := strings.Count(logs.String(), `members/a/b`); n != 1 {
		t.Errorf("the member a/b is named in %d log lines, want one warning:\n%s", n, logs.String())
	}
}

// TestLeaselessElectionKeyDeleted: a key under election/ without a lease,
// created before any member's, would keep every candidate waiting for it
// forever: no leader, no assignment, nothing logged. The first member to
// campaign deletes it with one warning and leads; status shows the key as
// a problem while it stands.
func TestLeaselessElectionKeyDeleted(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 2}
	const planted = "/keyshare/g/election/0"
	if _, err := cli.Put(t.Context(), planted, "nobody"); err != nil {
		t.Fatal(err)
	}
	view, err := coord.ReadGroupView(t.Context(), cli, schema.Group{Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if view.Leader != "" || len(view.Problems) != 1 || !strings.Contains(view.Problems[0].Error(), "election key without a lease") {
		t.Fatalf("status before any member: leader %q, problems %v; want no leader and the key named as a problem", view.Leader, view.Problems)
	}
	logs := &testutil.Buffer{}
	cfg := testConfig(t, "m", counts)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info})
	s, _ := join(t, e.Endpoints, cfg)
	waitFor(t, "m to lead and own every range", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return s.IsLeader() && settled(snap) && len(snap.Owned("m")) == len(snap.Ranges)
	})
	if n := strings.Count(logs.String(), "deleted an election key without a lease"); n != 1 {
		t.Errorf("%d warnings about the lease-less key, want one", n)
	}
}
