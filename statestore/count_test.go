package statestore

import (
	"testing"
	"time"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestCountThroughHandoffs: a per-key count kept in the Store is exactly
// each key's number of records of one partition through a scale-out (the
// partition's hash space split between the first member and a new one,
// each part restored by its owner) and a graceful leave (the leaver's
// part restored on the member that stays, merged or beside its own).
func TestCountThroughHandoffs(t *testing.T) {
	testutil.ParallelOnKfake(t)
	g := newGroup(t, 1)
	var all []testutil.Record
	produce := func(n int) {
		recs := testutil.KeyedRecords(n, 40)
		all = append(all, recs...)
		g.waitCommitted(testutil.Produce(t, g.brokers, g.topic, recs))
	}
	a := g.start("a", count, nil)
	produce(1000)
	b := g.start("b", count, nil)
	testutil.WaitFor(t, "b holding a part of the partition", 30*time.Second, func() bool { return len(activeRanges(b.c)) > 0 })
	produce(1000)
	a.stop(t)
	produce(500)
	b.stop(t)
	g.checkCounts(all)
	sa, sb := a.store.Stats(), b.store.Stats()
	t.Logf("a: %+v; b: %+v", sa, sb)
	if sa.Restores < 2 || sb.Restores < 2 {
		t.Errorf("a restored %d ranges and b %d: want at least 2 each (the whole partition or a part, before and after each move)", sa.Restores, sb.Restores)
	}
	if sa.Changes+sb.Changes < int64(len(all)) {
		t.Errorf("%d changes appended for %d records", sa.Changes+sb.Changes, len(all))
	}
}

// activeRanges are the ranges c holds and runs.
func activeRanges(c *consumer.Consumer) []consumer.RangeStatus {
	var out []consumer.RangeStatus
	for _, r := range c.Status().Ranges {
		if r.State == "active" {
			out = append(out, r)
		}
	}
	return out
}
