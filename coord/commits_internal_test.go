package coord

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/testutil"
)

// joinMember joins member id to group g (one partition of topic t) with
// its own etcd client, as a separate process would.
func joinMember(t *testing.T, endpoints []string, id string) *Session {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Group, cfg.MemberID, cfg.Topics = "g", id, []string{"t"}
	cfg.Partitions = func(context.Context, []string) (map[string]int32, error) { return map[string]int32{"t": 1}, nil }
	cfg.SessionTTL = 2 * time.Second
	cfg.RebalanceDebounce = 20 * time.Millisecond
	cfg.Logger = testutil.Logger(t)
	s, err := Join(t.Context(), testutil.NewEtcdClient(t, endpoints), cfg)
	if err != nil {
		t.Fatalf("join %s: %v", id, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// joinLeading joins member id (joinMember) and returns its session and,
// once it leads, its leadership as campaign built it: its election key
// and that key's create revision.
func joinLeading(t *testing.T, endpoints []string, id string) (*Session, *leader) {
	t.Helper()
	s := joinMember(t, endpoints, id)
	testutil.WaitFor(t, id+" leading", 30*time.Second, s.IsLeader)
	resp, err := s.cli.Get(t.Context(), s.schema.Election()+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if string(kv.Value) == id {
			return s, &leader{s: s, key: string(kv.Key), rev: kv.CreateRevision}
		}
	}
	t.Fatalf("no election key of %s", id)
	return nil, nil
}

// TestRecordCommitsConflict: a write whose key changed since it was read
// fails alone; the others in its transaction are recorded.
func TestRecordCommitsConflict(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)
	s := bareSession(t, cli, "g", 8)
	s.cfg.MaxTxnOps = 8
	lkey := s.schema.Election() + "/leader-test"
	lresp, err := cli.Put(t.Context(), lkey, "m1")
	if err != nil {
		t.Fatal(err)
	}
	l := &leader{s: s, key: lkey, rev: lresp.Header.Revision}
	var writes []commitWrite
	for p := range int32(20) {
		writes = append(writes, commitWrite{TopicPartition: ctp(p), Offset: 5})
	}
	if _, err := cli.Put(t.Context(), s.schema.Commit("t", 13), `{"v":1,"offset":1,"leader":"x","at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	written, conflicts, err := l.recordCommits(t.Context(), writes)
	if err != nil {
		t.Fatal(err)
	}
	if len(written) != 19 || len(conflicts) != 1 || conflicts[0] != ctp(13) {
		t.Fatalf("written %d, conflicts %v; want 19 and [t/13]", len(written), conflicts)
	}
}

// TestRecordCommitsDeposed: a leader that no longer leads records nothing.
func TestRecordCommitsDeposed(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	a, old := joinLeading(t, e.Endpoints, "a")
	joinMember(t, e.Endpoints, "b")
	_ = a.Close()
	_, _, err := old.recordCommits(t.Context(), []commitWrite{{TopicPartition: ctp(0), Offset: 5}})
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("deposed leader's recordCommits: %v, want ErrNotLeader", err)
	}
	resp, _ := cli.Get(t.Context(), "/keyshare/g/commits/t/00000")
	if len(resp.Kvs) != 0 {
		t.Fatalf("commit written: %s", resp.Kvs[0].Value)
	}
}

// TestDeposedLeaderCannotWrite: a leader's commit records are guarded by
// its election key; a stale read is a conflict, and once it no longer
// leads nothing it writes lands.
func TestDeposedLeaderCannotWrite(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	a, old := joinLeading(t, e.Endpoints, "a")
	tp := assign.TopicPartition{Topic: "t"}
	if _, _, err := old.recordCommits(t.Context(), []commitWrite{{TopicPartition: tp, Offset: 5}}); err != nil {
		t.Fatalf("leader's commit: %v", err)
	}
	// A stale read of the stored commit is a conflict, not lost leadership.
	written, conflicts, err := old.recordCommits(t.Context(), []commitWrite{{TopicPartition: tp, Offset: 6}})
	if err != nil || len(written) != 0 || len(conflicts) != 1 || conflicts[0] != tp {
		t.Fatalf("commit over a stale read: written %v, conflicts %v, err %v; want only a conflict on %v", written, conflicts, err, tp)
	}
	joinMember(t, e.Endpoints, "b")
	_ = a.Close()
	// a's leadership value outlives its leadership: every write must fail.
	resp, _ := cli.Get(t.Context(), "/keyshare/g/commits/t/00000")
	_, _, err = old.recordCommits(t.Context(), []commitWrite{{TopicPartition: tp, PrevRev: resp.Kvs[0].ModRevision, Offset: 3}})
	if !errors.Is(err, ErrNotLeader) {
		t.Fatalf("deposed leader's commit: %v, want ErrNotLeader", err)
	}
	resp, _ = cli.Get(t.Context(), "/keyshare/g/commits/t/00000")
	if !strings.Contains(string(resp.Kvs[0].Value), `"offset":5`) {
		t.Fatalf("commit changed: %s", resp.Kvs[0].Value)
	}
}
