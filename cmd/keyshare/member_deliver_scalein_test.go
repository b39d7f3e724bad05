package main

import (
	"os"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestMemberDeliversOnceOnScaleIn: two members share one partition's
// ranges and deliver to the Python endpoint, whose answers are slowed so
// that each member has requests open and records waiting; one of them
// leaves (SIGINT) while it delivers. Its drain budget ends before its
// records do: the requests still open are closed (the endpoint applies
// nothing of them) and its ranges go to the other member with records
// left to deliver. Every record arrives, each key's in offset order, and
// none twice but those of the requests b closed as it left, which the
// endpoint may have applied in that instant.
func TestMemberDeliversOnceOnScaleIn(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	ep, setDelay := startDelayingPyEndpoint(t)
	// 30 ms an answer, four requests open per member: about 270 records/s
	// for the two, so the leaving member is mid-stream.
	setDelay("0.03")
	const n, keys = 1000, 20
	member := func(id string) []string {
		return []string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", id,
			"--rebalance-debounce", "100ms", "--concurrency", "4", "--drain-timeout", "500ms",
			"--balance", "width", // ranges move on the leave only, not on measured load
			"--deliver", "http://" + ep.addr + "/"}
	}
	startDeliveringMember(t, member("a")...)
	b, bLog := startDeliveringMember(t, member("b")...)
	owns := func(id string) bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		return err == nil && len(snap.Owned(id)) > 0
	}
	testutil.WaitFor(t, "a and b share the partition", 30*time.Second, func() bool { return owns("a") && owns("b") })

	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(n, keys))
	delivered := func(id string) (c int) {
		for _, a := range ep.applied(t) {
			if a.Member == id {
				c++
			}
		}
		return c
	}
	testutil.WaitFor(t, "b delivers", 30*time.Second, func() bool { return delivered("b") >= 20 })
	if err := b.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(); err != nil {
		t.Fatalf("b did not leave cleanly: %v\n%s", err, bLog.String())
	}
	left := len(ep.applied(t))
	if left >= n {
		t.Fatalf("all %d records were delivered before b left: the leave happened with nothing in flight", left)
	}
	testutil.WaitFor(t, "b's ranges with a", 30*time.Second, func() bool { return !owns("b") })
	testutil.WaitFor(t, "every record delivered and committed", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})

	got := ep.applied(t)
	dups := checkKeyOrder(t, got, n, keys)
	// A request b still had open when its budget ran out may have been
	// applied in the instant b closed it (the endpoint's wait had just
	// ended, or its answer was on the way): applied for the endpoint,
	// pending for the ledger, so a sends it again. That is the most a
	// graceful leave may repeat: records of b's open requests (one record
	// each, at most --concurrency of them), applied by b first and once
	// more by a.
	firstBy := map[int64]string{}
	for _, r := range got {
		m, seen := firstBy[r.Offset]
		if !seen {
			firstBy[r.Offset] = r.Member
			continue
		}
		if m != "b" || r.Member != "a" {
			t.Errorf("offset %d delivered by %s, then again by %s: only a record of a request b closed as it left may arrive twice", r.Offset, m, r.Member)
		}
	}
	if dups > 4 {
		t.Errorf("%d records delivered twice on a graceful leave, want at most 4 (b's open requests)", dups)
	}
	// The leave moved keys with records still to deliver: a went on with
	// keys b had delivered records of.
	byB, moved := map[string]bool{}, map[string]bool{}
	for _, r := range got {
		switch {
		case r.Member == "b":
			byB[r.Key] = true
		case byB[r.Key]:
			moved[r.Key] = true
		}
	}
	if len(moved) == 0 {
		t.Errorf("a delivered no record of the %d keys b delivered: b finished its ranges before it left, so no handoff was tested", len(byB))
	}
	t.Logf("b delivered %d records, closed %d requests and left after %d of %d were delivered; a delivered %d, of %d keys b had delivered", delivered("b"), len(ep.cancelled(t)), left, n, delivered("a"), len(moved))
}
