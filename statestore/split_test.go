package statestore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// TestCountThroughSplitInFlight: a member's records are in flight under
// its range's token when the range is split and the member keeps a part
// under a new token. The part's next records, under the new token,
// restore its state while the older records' changes are still on their
// way: the restore must wait for those calls, or a key's next record reads
// a state without its previous change, and its count comes out under.
//
// The follower (follow.go) would take most such changes into the new
// table soon after they land, and hide the race: it is off here. With the
// state on disk the parts restore from the member's copy of the range it
// split, which must hold the changes of the held records too.
func TestCountThroughSplitInFlight(t *testing.T) {
	followChangelog = false
	t.Cleanup(func() { followChangelog = true })
	for _, disk := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "disk"}[disk], func(t *testing.T) {
			g := newGroup(t, 1)
			g.disk = disk
			testCountThroughSplitInFlight(t, g)
		})
	}
}

func testCountThroughSplitInFlight(t *testing.T, g *group) {
	gate := make(chan struct{})
	var entered atomic.Int64
	slow := func(key []byte) bool { return len(key) == 5 && string(key[:4]) == "key-" } // key-0 ... key-9
	held := func(ctx context.Context, m *kafka.Message) error {
		if slow(m.Key) {
			entered.Add(1)
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return count(ctx, m)
	}
	a := g.start("a", held, func(c *consumer.Config) { c.DrainTimeout = 30 * time.Second })
	first := testutil.KeyedRecords(400, 40)
	testutil.Produce(t, g.brokers, g.topic, first)
	testutil.WaitFor(t, "a's first records of ten keys held in its handler", 30*time.Second, func() bool { return entered.Load() >= 10 })
	b := g.start("b", count, nil)
	testutil.WaitFor(t, "a's range split, a keeping a part", 30*time.Second, func() bool {
		for _, r := range a.c.Status().Ranges {
			if r.State == "active" && r.Hi-r.Lo < ledger.HashSpace {
				return true
			}
		}
		return false
	})
	// Records of the other keys in a's part now run under its new token,
	// and restore it, while the held records' changes are not written.
	restores := a.store.Stats().Restores
	second := testutil.KeyedRecords(400, 40)
	testutil.Produce(t, g.brokers, g.topic, second)
	testutil.WaitFor(t, "a's part restoring, or restored, under its new token", 30*time.Second, func() bool {
		return a.store.Stats().Restores > restores || len(a.store.Restoring()) > 0
	})
	close(gate)
	recs := append(first, second...)
	testutil.WaitFor(t, "every record handled", 60*time.Second, func() bool {
		got, err := testutil.ReadCommitted(g.brokers, g.name, g.topic, g.parts)
		return err == nil && got[0] == int64(len(recs))
	})
	a.stop(t)
	b.stop(t)
	g.checkCounts(recs)
	t.Logf("a: %+v, b: %+v", a.store.Stats(), b.store.Stats())
	if g.disk && a.store.Stats().FromCopy == 0 {
		t.Error("a restored no part of its split range from its copy")
	}
}
