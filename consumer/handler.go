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

// process runs the handler on m with retries. It returns nil when the record
// is done (handled, or written to the dead-letter topic) and ctx's error if
// the member must stop working on it. mu guards j's retry fields.
func (c *Consumer) process(ctx context.Context, j *job, mu *sync.Mutex) error {
	m := j.m
	backoff := c.cfg.Retry.Backoff
	for attempt := 1; ; attempt++ {
		if j.p.hasKeyOps() {
			if op, ok := j.p.parkFor(j); ok {
				// Parked (park.go): the copy is the record's handling.
				if err := j.p.park(ctx, j, op); err != errParkChanged {
					return err
				}
			}
		}
		// Unparked or replayed: those records run first (prelude.go).
		if err := j.p.preludeFirst(ctx, j.tp(), j.m.Key, j.o); err != nil {
			return err
		}
		if j.p.hasKeyOps() {
			if op, ok := j.p.skipFor(ctx, j); ok {
				return j.p.skip(ctx, j, op, attempt-1)
			}
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
		// A fenced record is never dead-lettered: its range has a newer
		// owner, who runs it.
		if attempt >= c.cfg.Retry.MaxAttempts && c.dlq != nil && !errors.Is(err, ErrFenced) {
			// The handler is not called again: deadLetter retries the
			// write alone until it lands or ctx ends.
			if derr := c.deadLetter(ctx, m, err, attempt); derr != nil {
				return derr
			}
			c.metrics.deadLettered.Add(1)
			return nil
		}
		level := c.log.Warn
		if attempt < c.cfg.Retry.MaxAttempts {
			level = c.log.Debug
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
	if c.tracing != nil {
		var span trace.Span
		ctx, span = c.tracing.startHandle(ctx, m, attempt)
		defer func() { endSpan(span, err) }() // after the recover below
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	return c.cfg.Handler(ctx, m)
}
