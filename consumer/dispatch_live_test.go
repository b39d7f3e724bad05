package consumer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/schedule"
	"github.com/keyshare/keyshare/testutil"
)

// setLiveCheck makes live answer for p what answer says, and for every
// other pipeline what its session says, until the test ends.
func setLiveCheck(t *testing.T, p *pipeline, answer func() bool) {
	f := func(q *pipeline) bool {
		if q == p {
			return answer()
		}
		return q.sessionLive()
	}
	liveCheck.Store(&f)
	t.Cleanup(func() { liveCheck.CompareAndSwap(&f, nil) })
}

// TestFirstCallChecksLive: the session is live when the worker takes the
// record and past its deadline by the time the record's first call comes
// (a park or a prelude held it meanwhile). The handler is not called and
// the record stays pending for the range's next owner.
func TestFirstCallChecksLive(t *testing.T) {
	var calls atomic.Int32
	p, w := testPipeline(t, func(c *Config) {
		c.Concurrency = 0 // the batcher testPipeline makes runs nothing
		c.BatchHandler = nil
		c.Handler = func(context.Context, *kafka.Message) error {
			calls.Add(1)
			return nil
		}
	})
	sched := schedule.New[jobKey](1, p.runJob)
	p.sched = sched
	t.Cleanup(sched.Close)
	var reads atomic.Int32
	setLiveCheck(t, p, func() bool { return reads.Add(1) == 1 })
	feed(p, "a")
	testutil.WaitFor(t, "the record finished", 5*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.mu.inflight == 0
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("handler called %d times past the session's deadline (live read %d times)", n, reads.Load())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if wm, pending := w.st.Watermark(), w.st.Pending(); wm != 0 || pending != 1 {
		t.Fatalf("watermark %d, %d pending; want 0 and the record pending", wm, pending)
	}
}

// TestRetryChecksLive: a record whose first call fails is not called
// again once the session is no longer live after its backoff: the
// retry asks Live right before the call too.
func TestRetryChecksLive(t *testing.T) {
	var calls atomic.Int32
	p, w := testPipeline(t, func(c *Config) {
		c.Concurrency = 0 // the batcher testPipeline makes runs nothing
		c.BatchHandler = nil
		c.Retry = RetryPolicy{MaxAttempts: 100, Backoff: time.Millisecond, MaxBackoff: time.Millisecond}
		c.Handler = func(context.Context, *kafka.Message) error {
			if calls.Add(1) == 1 {
				return errors.New("refused")
			}
			return nil
		}
	})
	sched := schedule.New[jobKey](1, p.runJob)
	p.sched = sched
	t.Cleanup(sched.Close)
	var reads atomic.Int32
	setLiveCheck(t, p, func() bool { return reads.Add(1) <= 2 }) // runJob's, then the first call's
	feed(p, "a")
	testutil.WaitFor(t, "the record finished", 5*time.Second, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.mu.inflight == 0
	})
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want once: a retry ran past the session's deadline (live read %d times)", n, reads.Load())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if wm, pending := w.st.Watermark(), w.st.Pending(); wm != 0 || pending != 1 {
		t.Fatalf("watermark %d, %d pending; want 0 and the record pending", wm, pending)
	}
}
