package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestStaleRereadAfterRelease: the assignment a reread returns reaches the
// fetch loop on its own channel, so it can come after updates the view
// published later. The member's view publishes a release it has just made
// at the revision it already had (its watch has not brought the release
// yet), so that later update and an earlier reread can carry the same
// revision: one without the released range, one still listing it as
// revoking, with the ledger entry read before the drain. Applied last, the
// stale one took the range up again from that old entry: a hand-back then
// kept it, and the member ran again every record the release had
// recorded as done (seen in a CI run: ten records handled twice after a
// graceful handoff). A reread no newer than what the member applied must
// change nothing.
func TestStaleRereadAfterRelease(t *testing.T) {
	testutil.RequireKfake(t, "the fetch loop's order of assignments read from etcd; the kfake run covers it")
	r := newRig(t, func(context.Context, *kafka.Message) error { return nil }, false, nil)
	next := func(what string, ok func(schema.Assignment) bool) schema.Assignment {
		t.Helper()
		var got schema.Assignment
		testutil.WaitFor(t, what, 20*time.Second, func() bool {
			select {
			case got = <-r.sess.Updates():
				return ok(got)
			default:
				return false
			}
		})
		return got
	}
	isRevoking := func(a schema.Assignment) bool {
		return len(a.Ranges) == 1 && a.Ranges[0].Record.State == schema.StateRevoking
	}

	r.put(r.full(schema.StateActive), initialized(0))
	if err := r.p.reconcile(next("the range assigned", func(a schema.Assignment) bool { return len(a.Ranges) == 1 })); err != nil {
		t.Fatal(err)
	}
	rev := r.full(schema.StateRevoking)
	rev.Target = "m"
	r.put(rev, nil)
	revoked := next("the revoke in the view", isRevoking)
	if err := r.p.reconcile(revoked); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the range released", 20*time.Second, func() bool {
		return r.owned(func(w *owned) bool { return w == nil })
	})
	if got := r.stored().Record.State; got != schema.StateReleased {
		t.Fatalf("the range record is %s after the drain, want released", got)
	}

	// The view's update for the release, at the revision it had.
	if err := r.p.reconcile(schema.Assignment{Generation: revoked.Generation, Rev: revoked.Rev}); err != nil {
		t.Fatal(err)
	}
	// The reread answered before it, arriving late.
	if err := r.p.applyReread(revoked); err != nil {
		t.Fatal(err)
	}
	if r.owned(func(w *owned) bool { return w != nil }) {
		t.Fatal("a reread as old as the applied assignment took the released range up again, from the ledger entry read before its drain")
	}
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if n := len(r.p.mu.assigned); n != 0 {
		t.Errorf("the member fetches %d partitions after the stale reread, want 0", n)
	}
}
