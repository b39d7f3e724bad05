package coord

import (
	"bytes"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// putRange writes a range record and, if e is not nil, its ledger entry in
// one transaction, as the leader does.
func putRange(t *testing.T, cli *clientv3.Client, s *Session, rec schema.RangeRecord, e *ledger.Entry) []clientv3.Op {
	t.Helper()
	rec.V = recordVersion
	ops := []clientv3.Op{clientv3.OpPut(s.schema.Range(rec.Topic, rec.Partition, rec.Lo), mustJSON(rec))}
	if e != nil {
		ops = append(ops, clientv3.OpPut(s.schema.LedgerEntry(rec.Topic, rec.Partition, rec.Lo), string(ledger.Encode(*e))))
	}
	return ops
}

func commit(t *testing.T, cli *clientv3.Client, ops []clientv3.Op) int64 {
	t.Helper()
	resp, err := cli.Txn(t.Context()).Then(ops...).Commit()
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// sameAssignment fails unless a and the assignment a whole-group read gives
// name the same ranges, at the same revisions, with the same ledger state.
func sameAssignment(t *testing.T, cli *clientv3.Client, s *Session, a schema.Assignment) {
	t.Helper()
	snap, err := ReadSnapshot(t.Context(), cli, s.group())
	if err != nil {
		t.Fatal(err)
	}
	want := snap.AssignmentOf(s.ID())
	if len(a.Ranges) != len(want.Ranges) {
		t.Fatalf("view has %d ranges, a read of the group %d", len(a.Ranges), len(want.Ranges))
	}
	for i, r := range a.Ranges {
		w := want.Ranges[i]
		if r.Key != w.Key || r.Rev != w.Rev || r.Record != w.Record || r.LedgerKey != w.LedgerKey || r.EntryRev != w.EntryRev ||
			!bytes.Equal(ledger.Encode(r.Entry), ledger.Encode(w.Entry)) {
			t.Fatalf("range %d: view %+v, read of the group %+v", i, r, w)
		}
	}
	if a.Generation != want.Generation {
		t.Fatalf("generation %d, want %d", a.Generation, want.Generation)
	}
}

// TestAssignmentViewReadsWhatChanged: a member's handling of an assignment
// change reads the ledger entries of the ranges that changed, not the group.
func TestAssignmentViewReadsWhatChanged(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	leader := testutil.NewEtcdClient(t, e.Endpoints)
	cli, counts := countingClient(t, e.Endpoints)
	s := bareSession(t, cli, "view", DefaultMaxTxnOps)
	const parts = 500
	var ops []clientv3.Op
	for i := range parts {
		owner := "m1"
		if i%2 == 1 {
			owner = "m2"
		}
		e := sampleEntry(i)
		ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: int32(i), Lo: 0, Hi: ledger.HashSpace, Owner: owner, State: schema.StateActive}, &e)...)
		if len(ops) >= 100 {
			commit(t, leader, ops)
			ops = nil
		}
	}
	// A damaged record overlapping partition 1's range: no view gives it.
	ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: 1, Lo: 100, Hi: 200, Owner: "m1", State: schema.StateActive}, nil)...)
	ops = append(ops, clientv3.OpPut(s.schema.Generation(), mustJSON(schema.GenerationRecord{V: recordVersion, Generation: 7, Leader: "m2"})))
	commit(t, leader, ops)

	updates := make(chan schema.Assignment, 100)
	s.view = newAssignmentView(cli, s.schema, s.ID(), DefaultMaxTxnOps, s.log, func(a schema.Assignment) { updates <- a })
	s.goFunc(func() { s.view.run(s.ctx) })
	first := <-updates
	if len(first.Ranges) != parts/2 {
		t.Fatalf("first assignment has %d ranges, want %d", len(first.Ranges), parts/2)
	}
	sameAssignment(t, leader, s, first)

	// One leader round: partition 1 moves to m1 (with its clipped entry),
	// partition 0 leaves m1, partition 2 is revoked from m1, partition 3
	// moves between other members.
	readBefore, txnsBefore, rangesBefore := counts.keysRead(), counts.get("/etcdserverpb.KV/Txn"), counts.get("/etcdserverpb.KV/Range")
	e1 := sampleEntry(1001)
	ops = putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: 1, Lo: 0, Hi: ledger.HashSpace, Owner: "m1", State: schema.StateActive}, &e1)
	ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: 0, Lo: 0, Hi: ledger.HashSpace, Owner: "m3", State: schema.StateActive}, nil)...)
	ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: 2, Lo: 0, Hi: ledger.HashSpace, Owner: "m1", State: schema.StateRevoking, Target: "m3"}, nil)...)
	ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: 3, Lo: 0, Hi: ledger.HashSpace, Owner: "m3", State: schema.StateActive}, nil)...)
	ops = append(ops, clientv3.OpPut(s.schema.Generation(), mustJSON(schema.GenerationRecord{V: recordVersion, Generation: 8, Leader: "m2"})))
	rev := commit(t, leader, ops)
	var a schema.Assignment
	for a.Rev < rev {
		select {
		case a = <-updates:
		case <-time.After(30 * time.Second):
			t.Fatalf("no assignment at revision %d published", rev)
		}
	}
	// The generation may trail by a watch event; wait for the view to hold it.
	waitFor(t, "generation 8", func() bool { a2, _ := s.view.current(t.Context(), rev); return a2.Generation == 8 })
	a, _ = s.view.current(t.Context(), rev)
	sameAssignment(t, leader, s, a)
	// Partitions 1 and 2 changed for m1: their two ledger entries are all
	// it read, in one transaction.
	if got := counts.keysRead() - readBefore; got != 2 {
		t.Fatalf("handling the change read %d keys, want 2 (the ledger entries of the ranges that changed)", got)
	}
	if txns, ranges := counts.get("/etcdserverpb.KV/Txn")-txnsBefore, counts.get("/etcdserverpb.KV/Range")-rangesBefore; txns != 1 || ranges != 0 {
		t.Fatalf("handling the change took %d transactions and %d range reads, want 1 and 0", txns, ranges)
	}

	// A generation that changes none of m1's ranges still reaches it (its
	// status and the keyshare_generation metric show the group's).
	commit(t, leader, []clientv3.Op{clientv3.OpPut(s.schema.Generation(), mustJSON(schema.GenerationRecord{V: recordVersion, Generation: 9, Leader: "m2"}))})
	for a.Generation < 9 {
		select {
		case a = <-updates:
		case <-time.After(30 * time.Second):
			t.Fatalf("generation 9 never published; the last assignment has %d", a.Generation)
		}
	}

	// ReadAssignment catches up with a change it has not been told of yet.
	e5 := sampleEntry(5005)
	rev = commit(t, leader, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: 5, Lo: 0, Hi: ledger.HashSpace, Owner: "m1", State: schema.StateActive}, &e5))
	got, err := s.ReadAssignment(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got.Rev < rev {
		t.Fatalf("ReadAssignment at revision %d, after a change at %d", got.Rev, rev)
	}
	sameAssignment(t, leader, s, got)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAssignmentViewReleases: ranges the member released leave its
// assignment at once and stay out of it until their record changes, and
// WaitReleased returns only when the leader has handed them off.
func TestAssignmentViewReleases(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	leader := testutil.NewEtcdClient(t, e.Endpoints)
	s := bareSession(t, leader, "released", DefaultMaxTxnOps)
	lease, err := leader.Grant(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.Put(t.Context(), s.schema.Member("m2"), mustJSON(schema.MemberInfo{V: recordVersion, ID: "m2", Weight: 1}), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	var ops []clientv3.Op
	for i := range 3 {
		e := sampleEntry(i)
		ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: int32(i), Lo: 0, Hi: ledger.HashSpace, Owner: "m1", State: schema.StateRevoking, Target: "m2"}, &e)...)
	}
	commit(t, leader, ops)
	updates := make(chan schema.Assignment, 100)
	s.view = newAssignmentView(leader, s.schema, s.ID(), DefaultMaxTxnOps, s.log, func(a schema.Assignment) { updates <- a })
	s.goFunc(func() { s.view.run(s.ctx) })
	first := <-updates
	if len(first.Ranges) != 3 {
		t.Fatalf("first assignment has %d ranges, want 3", len(first.Ranges))
	}

	// Partition 0 released: its write has not reached the watch yet.
	s.view.noteReleased(first.Ranges[:1])
	if a := <-updates; len(a.Ranges) != 2 || a.Ranges[0].Key != first.Ranges[1].Key {
		t.Fatalf("after the release the assignment is %+v, want partitions 1 and 2", a.Ranges)
	}
	// Changes that make the view look at partition 0 again (a damaged
	// record there) and at partition 1: the released range must not come
	// back.
	rev := commit(t, leader, append(
		putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: 1, Lo: 0, Hi: ledger.HashSpace, Owner: "m1", State: schema.StateActive}, nil),
		clientv3.OpPut(s.schema.Range("t", 0, 5), "not a range record")))
	a, err := s.view.current(t.Context(), rev)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range a.Ranges {
		if r.Key == first.Ranges[0].Key {
			t.Fatalf("a released range is back in the assignment: %+v", a.Ranges)
		}
	}

	// WaitReleased waits while a record still names the member, released
	// or not, and returns when the leader has handed everything off.
	waited := make(chan error, 1)
	go func() { waited <- s.WaitReleased(t.Context()) }()
	released := schema.RangeRecord{Topic: "t", Partition: 0, Lo: 0, Hi: ledger.HashSpace, Owner: "m1", State: schema.StateReleased, Target: "m2"}
	ops = putRange(t, leader, s, released, nil)
	for _, p := range []int32{1, 2} {
		ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: p, Lo: 0, Hi: ledger.HashSpace, Owner: "m1", State: schema.StateReleased, Target: "m2"}, nil)...)
	}
	rev = commit(t, leader, ops)
	if _, err := s.view.current(t.Context(), rev); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		t.Fatalf("WaitReleased returned (%v) while the member's released ranges were not handed off", err)
	default:
	}
	ops = nil
	for _, p := range []int32{0, 1, 2} {
		ops = append(ops, putRange(t, leader, s, schema.RangeRecord{Topic: "t", Partition: p, Lo: 0, Hi: ledger.HashSpace, Owner: "m2", State: schema.StateActive}, nil)...)
	}
	commit(t, leader, ops)
	select {
	case err := <-waited:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("WaitReleased did not return after the handoff")
	}
}
