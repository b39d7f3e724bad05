package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// handleAlone handles m, a prelude's record of the key with hash h of t,
// outside the pipeline's scheduling: the handler (or the BatchHandler with
// the record alone), retried per Config.Retry and dead-lettered after the
// last attempt when a dead-letter topic is configured. It returns nil once
// the record is done, errNotOwner once the member may no longer work on
// the key, ctx's error if the member must stop.
//
// Each call is made as runJob makes a record's: only while the session is
// live (past its conservative deadline the leader may have given the
// range away, coord/deadline.go), with a context that answers FenceOf
// with the range holding the key as the member holds it then, so a sink
// can refuse a member that lost the range. A fenced answer is retried and
// never counts towards the attempt limit: the range's next owner runs the
// record. While the record fails, run.failing says so: it is the key's
// stuck record (Status, and the stuck report of stuck.go).
func (p *pipeline) handleAlone(ctx context.Context, t tp, m *kafka.Message, h uint32, run *preludeRun) error {
	c := p.c
	backoff := c.cfg.Retry.Backoff
	var spent attemptCount
	defer func() {
		p.mu.Lock()
		run.failing = nil
		p.mu.Unlock()
	}()
	for attempt := 1; ; attempt++ {
		fctx, ok := p.preludeFence(ctx, t, m, h)
		if !ok || !p.live() {
			return errNotOwner
		}
		var err error
		if c.cfg.Handler != nil {
			err = c.call(fctx, m, attempt)
		} else {
			var res []error
			if res, err = c.callBatch(fctx, []*kafka.Message{m}, attempt); err == nil && len(res) == 1 {
				err = res[0]
			}
		}
		if err == nil {
			c.metrics.handled.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.metrics.failed.Add(1)
		fenced := errors.Is(err, ErrFenced)
		if spent.fail(err, c.cfg.Retry.MaxAttempts) && c.dlq != nil {
			if derr := c.deadLetters.Write(ctx, m, err, int(spent)); derr != nil {
				return derr
			}
			c.metrics.deadLettered.Add(1)
			return nil
		}
		p.mu.Lock()
		if run.failing == nil {
			run.failing = &preludeFailure{offset: int64(m.TopicPartition.Offset), since: time.Now()}
		}
		run.failing.attempts, run.failing.lastErr = attempt, textsafe.Cut(textsafe.Escape(err.Error()), 512)
		p.mu.Unlock()
		c.metrics.retried.Add(1)
		c.log.Warn("handler failed on a prelude's record (unpark or replay); retrying", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition,
			"offset", m.TopicPartition.Offset, "attempt", attempt, "fenced", fenced, "error", textsafe.Escape(err.Error()))
		sleep(ctx, backoff)
		backoff = min(2*max(backoff, time.Millisecond), c.cfg.Retry.MaxBackoff)
	}
}

// preludeFence returns ctx answering FenceOf for m with the range of t
// that holds hash h now, as a record in flight under it would; false if
// the member holds no such range any more.
func (p *pipeline) preludeFence(ctx context.Context, t tp, m *kafka.Message, h uint32) (context.Context, bool) {
	p.mu.Lock()
	w := holding(p.mu.byTP, t, h)
	p.mu.Unlock()
	if w == nil {
		return nil, false
	}
	// Never in a partition's in-flight list: fenceOf answers with w's
	// record as the member holds it when the handler asks.
	j := &job{key: keyedJobKey(t, m.Key), o: int64(m.TopicPartition.Offset), m: m, p: p, w: w}
	return context.WithValue(ctx, fenceKey{}, fenceSource(j)), true
}

// preludeFailure is a prelude's record that has failed and is retried.
type preludeFailure struct {
	offset   int64 // the record's offset in the key's own partition
	since    time.Time
	attempts int
	lastErr  string
}

// describe is f as the key's stuck record's error reads it.
func (f *preludeFailure) describe(op string) string {
	return fmt.Sprintf("the key's %s is retrying its record at offset %d: %s", op, f.offset, f.lastErr)
}

// preludeFailingLocked reports whether a prelude of key of t retries a
// failing record: the key's stuck record is that one, not the live record
// waiting behind it (Status).
func (p *pipeline) preludeFailingLocked(t tp, key []byte) bool {
	for run := range p.mu.preludes[t] {
		if run.failing != nil && string(run.key) == string(key) {
			return true
		}
	}
	return false
}
