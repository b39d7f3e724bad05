package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestMemberCancelsSlowEndpointOnRevoke: the endpoint takes longer to
// answer than the drain budget while a second member joins and takes half
// of the partition. The first member closes its requests of the revoked
// half once the budget is spent, without waiting for the endpoint's
// answer; the endpoint applies nothing of a closed request, the half moves
// and its new owner delivers those records again. Every record arrives,
// each key's in order as the endpoint saw them.
func TestMemberCancelsSlowEndpointOnRevoke(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	ep, setDelay := startDelayingPyEndpoint(t)
	const (
		n, keys = 400, 20
		budget  = 300 * time.Millisecond
		slow    = 3 * time.Second // the endpoint's wait: ten drain budgets
	)
	records := testutil.KeyedRecords(n, keys)
	testutil.Produce(t, k.Brokers, "orders", records[:n/2])
	member := func(id string) []string {
		return []string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", id,
			"--rebalance-debounce", "100ms", "--drain-timeout", budget.String(), "--concurrency", "8",
			"--balance", "width", // ranges move on the join only, not later on measured load
			"--deliver", "http://" + ep.addr + "/"}
	}
	_, aLog := startDeliveringMember(t, member("a")...)
	testutil.WaitFor(t, "a delivers", 30*time.Second, func() bool { return len(ep.applied(t)) >= 50 })

	setDelay(fmt.Sprint(slow.Seconds())) // a's next requests all wait at the endpoint
	testutil.Produce(t, k.Brokers, "orders", records[n/2:])
	time.Sleep(500 * time.Millisecond) // a's workers each send a request the endpoint holds
	startDeliveringMember(t, member("b")...)
	var joined time.Time
	testutil.WaitFor(t, "b registered", 30*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		if _, ok := snap.Members["b"]; err == nil && ok {
			joined = time.Now()
			return true
		}
		return false
	})
	testutil.WaitFor(t, "a's requests of the revoked half closed", 10*time.Second, func() bool {
		return len(ep.cancelled(t)) > 0 && strings.Contains(aLog.String(), "drain budget spent with records in flight")
	})
	testutil.WaitFor(t, "b owns half of the partition", 10*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		return err == nil && len(snap.Owned("b")) > 0 && len(snap.Owned("a")) > 0
	})
	setDelay("0")
	testutil.WaitFor(t, "every record delivered and committed", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})

	// Closed within the budget of the revoke (which follows b's join by the
	// leader's debounce and a round: 2 s leaves room for a loaded
	// machine), not when the endpoint would have answered.
	cancelledOffsets := map[int64]bool{}
	for _, c := range ep.cancelled(t) {
		sent, closed := time.UnixMilli(int64(c.Sent*1000)), time.UnixMilli(int64(c.Closed*1000))
		t.Logf("%s's request of offsets %v closed %s after it was sent, %s after b registered",
			c.Member, c.Cancelled, closed.Sub(sent).Round(time.Millisecond), closed.Sub(joined).Round(time.Millisecond))
		if c.Member != "a" {
			t.Errorf("%s closed a request of offsets %v: only a lost a range", c.Member, c.Cancelled)
		}
		if closed.Sub(sent) >= slow || closed.Sub(joined) > budget+2*time.Second {
			t.Errorf("a's request of offsets %v closed %s after it was sent and %s after b registered: want within the %s budget of the revoke",
				c.Cancelled, closed.Sub(sent), closed.Sub(joined), budget)
		}
		for _, o := range c.Cancelled {
			cancelledOffsets[o] = true
		}
	}

	// Nothing lost, each key in order; a cancelled record arrives from b,
	// and once b delivered a key's record, a delivers none of that key.
	got := ep.applied(t)
	checkKeyOrder(t, got, n, keys)
	byB := map[string]bool{}
	for _, r := range got {
		switch {
		case r.Member == "b":
			byB[r.Key] = true
			delete(cancelledOffsets, r.Offset)
		case byB[r.Key]:
			t.Errorf("a delivered %s after b delivered records of %s", r.Value, r.Key)
		}
	}
	if len(cancelledOffsets) > 0 {
		t.Errorf("offsets %v of cancelled requests never delivered by b", cancelledOffsets)
	}
}
