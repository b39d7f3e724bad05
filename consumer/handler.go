package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/trace"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// attemptCount is how many of a record's attempts count towards
// Retry.MaxAttempts. A fenced answer (ErrFenced) counts none: it says the
// member may no longer hold the record's range, not that the record
// failed, and the range's next owner runs it. Every retry loop keeps one
// per record (process, failed in batch.go, a prelude's handleAlone).
type attemptCount int

// fail counts a call that failed with err, and reports whether the
// record has used its max attempts: then it is dead-lettered, when a
// dead-letter topic is configured. A fenced answer never has.
func (n *attemptCount) fail(err error, max int) (exhausted bool) {
	if errors.Is(err, ErrFenced) {
		return false
	}
	*n++
	return int(*n) >= max
}

// last reports whether the attempts counted so far leave none before
// max: a failure now is logged as a warning, not at debug level.
func (n attemptCount) last(max int) bool { return int(n) >= max }

// process runs the handler on m with retries. It returns nil when the record
// is done (handled, or written to the dead-letter topic) and ctx's error if
// the member must stop working on it. mu guards j's retry fields.
func (c *Consumer) process(ctx context.Context, j *job, mu *sync.Mutex) error {
	m := j.m
	backoff := c.cfg.Retry.Backoff
	var spent attemptCount
	for attempt := 1; ; attempt++ {
		if settled, err := j.p.keyOpsFirst(ctx, j, attempt, spent); settled {
			return err
		}
		if !j.p.live() {
			// Every call right after asking (docs/design.md): runJob
			// asked before the park or the prelude above, which can
			// hold the record for long, and a retry comes after its
			// backoff, past which the lease may have run out.
			return errNotLive
		}
		err := c.call(ctx, m, attempt)
		if err == nil {
			c.metrics.handled.Add(1)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.metrics.failed.Add(1)
		mu.Lock()
		// Escaped: it reaches stuck/ values, status and logs.
		n := j.notesLocked()
		n.attempts, n.lastErr = attempt, textsafe.Escape(err.Error())
		mu.Unlock()
		if spent.fail(err, c.cfg.Retry.MaxAttempts) && c.dlq != nil {
			// The handler is not called again: deadLetter retries the
			// write alone until it lands or ctx ends.
			if derr := c.deadLetters.Write(ctx, m, err, int(spent)); derr != nil {
				return derr
			}
			c.metrics.deadLettered.Add(1)
			return nil
		}
		level := c.log.Debug
		if spent.last(c.cfg.Retry.MaxAttempts) {
			level = c.log.Warn
		}
		level("handler failed; retrying", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition,
			"offset", m.TopicPartition.Offset, "key", textsafe.Bytes(m.Key), "attempt", attempt, "error", textsafe.Escape(err.Error()))
		c.metrics.retried.Add(1)
		j.p.sleepOrKeyOp(ctx, backoff)
		if ctx.Err() != nil {
			// Cancelled while waiting (its range drained or dropped): no
			// new attempt, the next owner may be running the key.
			return ctx.Err()
		}
		backoff = min(2*backoff, c.cfg.Retry.MaxBackoff)
		if backoff == 0 {
			backoff = time.Millisecond
		}
	}
}

// call runs the handler for attempt at m, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, m *kafka.Message, attempt int) (err error) {
	if c.spans != nil {
		var span trace.Span
		ctx, span = c.spans.StartRecord(ctx, m, attempt)
		defer func() { c.spans.EndRecord(span, err) }() // after the recover below
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return c.cfg.Handler(ctx, m)
}
