package consumer

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/schedule"
	"github.com/keyshare/keyshare/testutil"
)

// TestUnfinishedRecordGivenBack: a@0 finishes not done on the range the
// member keeps (its call finds the session's deadline passed; a park or
// a prelude that cannot go on ends a record the same way). It leaves the
// records in flight, pending in the ledger; a@1, queued behind it, does
// not overtake it; the key's shelf fetches the partition again from a@0,
// and then a@0 and a@1 run in order and the watermark passes both.
func TestUnfinishedRecordGivenBack(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	p, w := testPipeline(t, func(c *Config) {
		c.Concurrency = 0 // the batcher testPipeline makes runs nothing
		c.BatchHandler = nil
		c.Handler = func(_ context.Context, m *kafka.Message) error {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, name(m))
			return nil
		}
	})
	p.mu.shelves = make(map[tp]shelf)
	p.mu.assigned = map[tp]bool{{Topic: "t"}: true}
	sched := schedule.New[jobKey](1, p.runJob)
	p.sched = sched
	t.Cleanup(sched.Close)
	var reads atomic.Int32
	setLiveCheck(t, p, func() bool { return reads.Add(1) != 2 }) // a@0's call, once
	feed(p, "a", "a")
	testutil.WaitFor(t, "no record in flight", 5*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.mu.inflight == 0
	})
	mu.Lock()
	if len(ran) != 0 {
		t.Fatalf("ran %v while a@0 was not done: a later record of its key overtook it", ran)
	}
	mu.Unlock()
	p.mu.Lock()
	dispatched, pending := w.st.Dispatched(), w.st.Pending()
	seeks := p.releaseShelvesLocked() // the fetch loop's look at the shelves
	p.mu.Unlock()
	if dispatched != 0 || pending != 2 {
		t.Fatalf("%d records dispatched, %d pending; want none dispatched, a@0 and a@1 pending to run again", dispatched, pending)
	}
	if len(seeks) != 1 || seeks[0].offset != 0 {
		t.Fatalf("fetch again from %v, want partition t/0 from offset 0", seeks)
	}
	feed(p, "a", "a") // the records fetched again
	testutil.WaitFor(t, "the watermark past a@1", 5*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return w.st.Watermark() == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(ran, []string{"a@0", "a@1"}) {
		t.Fatalf("ran %v, want [a@0 a@1]", ran)
	}
}
