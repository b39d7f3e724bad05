package consumer

import (
	"errors"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// A batch's failed records, retried each alone.

// retrying is a failed record of a batch being retried: attempt is the
// number of its last call, spent the attempts that count (attemptCount).
type retrying struct {
	j       *job
	attempt int
	spent   attemptCount
}

// failed records failed attempt r.attempt of r's record and dead-letters it
// at the last attempt. It reports whether the record is to be retried;
// if not, it is finished.
func (p *pipeline) failed(r *retrying, cause error) bool {
	c, j, m := p.c, r.j, r.j.m
	c.metrics.failed.Add(1)
	exhausted := r.spent.fail(cause, c.cfg.Retry.MaxAttempts)
	p.mu.Lock()
	// Escaped: it reaches stuck/ values, status and logs.
	n := j.notesLocked()
	n.attempts, n.lastErr = r.attempt, textsafe.Escape(cause.Error())
	p.mu.Unlock()
	if p.settledByKeyOp(r) {
		return false
	}
	if exhausted && c.dlq != nil {
		derr := c.deadLetters.Write(&j.ctx, m, cause, int(r.spent))
		switch {
		case derr == nil:
			c.metrics.deadLettered.Add(1)
			p.finishJob(j, true)
			return false
		case j.ctx.Err() != nil:
			p.finishJob(j, false)
			return false
		}
		c.log.Error("dead-letter write failed; retrying the record", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition, "offset", m.TopicPartition.Offset, "error", textsafe.Escape(derr.Error()))
	}
	level := c.log.Debug
	if r.spent.last(c.cfg.Retry.MaxAttempts) {
		level = c.log.Warn
	}
	level("batch handler failed a record; retrying", "topic", *m.TopicPartition.Topic, "partition", m.TopicPartition.Partition,
		"offset", m.TopicPartition.Offset, "key", textsafe.Bytes(m.Key), "attempt", r.attempt, "error", textsafe.Escape(cause.Error()))
	c.metrics.retried.Add(1)
	return true
}

// settledByKeyOp applies to r's record the park or the skip an operator
// has set on its key since its last attempt, if any, and reports whether
// that finished the record: a parked copy (park.go), or a skip's dead
// letter or drop (keyops.go), is its handling, and the handler is not
// called for it again.
func (p *pipeline) settledByKeyOp(r *retrying) bool {
	if !p.hasKeyOps() {
		return false
	}
	j := r.j
	if op, ok := p.parkFor(j); ok {
		if err := p.park(&j.ctx, j, op); err != errParkChanged {
			p.finishJob(j, err == nil)
			return true
		}
	}
	if op, ok := p.skipFor(&j.ctx, j); ok {
		err := p.skip(&j.ctx, j, op, int(r.spent))
		p.finishJob(j, err == nil)
		return true
	}
	return false
}

// retryBatch retries the failed records of b, each in a batch of its own,
// after the backoff (doubling up to Retry.MaxBackoff), until each is done,
// dead-lettered or abandoned; each key is released, with its records put
// back, as soon as its failed record finishes.
func (p *pipeline) retryBatch(b *batch, failing []*retrying, putBack map[jobKey][]*job) {
	end := func(r *retrying, done bool) {
		if done {
			p.finishJob(r.j, true)
		}
		b.Release(r.j.key, putBack[r.j.key])
	}
	// settle finishes the records whose context ended (their range was
	// dropped: they run again on its next owner) and those an operator's
	// park or skip settled, and releases their keys.
	settle := func() {
		failing = keepIf(failing, func(r *retrying) bool {
			switch {
			case r.j.ctx.Err() != nil:
				p.finishJob(r.j, false)
			case !p.settledByKeyOp(r):
				return true
			}
			end(r, false)
			return false
		})
	}
	backoff := p.c.cfg.Retry.Backoff
	for len(failing) > 0 && p.ctx.Err() == nil {
		until := time.Now().Add(backoff)
		for len(failing) > 0 && time.Now().Before(until) && p.ctx.Err() == nil {
			// Woken early by a change of the key operations: a skip or
			// a park set meanwhile is applied now, not after the backoff.
			ctx, done := p.groupCtx(jobsOf(failing))
			p.sleepOrKeyOp(ctx, time.Until(until))
			done()
			settle()
		}
		backoff = min(2*backoff, p.c.cfg.Retry.MaxBackoff)
		if backoff == 0 {
			backoff = time.Millisecond
		}
		if len(failing) == 0 || p.ctx.Err() != nil {
			break
		}
		// Each record alone: a batch that failed as a whole (a panic, a
		// bulk call refused) would otherwise fail again with the same
		// neighbour, and dead-letter healthy records with it.
		next := failing[:0]
		for _, r := range failing {
			switch p.retryAlone(r) {
			case retryAgain:
				next = append(next, r)
			case retryDone:
				end(r, true)
			default:
				end(r, false) // finished already
			}
		}
		failing = next
	}
	// The session ended: every record stays pending (its context ended).
	for _, r := range failing {
		p.finishJob(r.j, false)
		end(r, false)
	}
}

func jobsOf(rs []*retrying) []*job {
	out := make([]*job, len(rs))
	for i, r := range rs {
		out[i] = r.j
	}
	return out
}

func keepIf[T any](s []T, keep func(T) bool) []T {
	out := s[:0]
	for _, x := range s {
		if keep(x) {
			out = append(out, x)
		}
	}
	return out
}

// retryOutcome is what one retried call left of a record.
type retryOutcome int

const (
	retryAgain    retryOutcome = iota // failed, or the session is ending: retried later
	retryDone                         // handled: to be finished done
	retryFinished                     // finished (cancelled, parked, skipped, dead-lettered)
)

// retryAlone makes r's next attempt, its record alone in the call, unless
// its context ended since the backoff (its range drained or dropped: no new
// attempt) or an operator's park or skip settled it.
func (p *pipeline) retryAlone(r *retrying) retryOutcome {
	if r.j.ctx.Err() != nil {
		p.finishJob(r.j, false)
		return retryFinished
	}
	if p.settledByKeyOp(r) {
		return retryFinished
	}
	if !p.live() {
		// Past the session's conservative deadline after the backoff:
		// no call (docs/design.md); the record stays pending.
		p.finishJob(r.j, false)
		return retryFinished
	}
	ctx, done := p.groupCtx([]*job{r.j})
	start := time.Now()
	res, err := p.c.callBatch(ctx, []*kafka.Message{r.j.m}, r.attempt+1)
	r.j.busy += time.Since(start)
	cancelled := ctx.Err() != nil
	done()
	if errors.Is(err, ErrBatchResults) {
		p.log.Error("BatchHandler returned the wrong number of results: the retried record counts as failed", "error", err)
	}
	switch {
	case err == nil && res[0] == nil:
		p.c.metrics.handled.Add(1)
		return retryDone
	case r.j.ctx.Err() != nil:
		p.finishJob(r.j, false)
		return retryFinished
	case cancelled:
		return retryAgain // the session is ending; not an attempt
	}
	cause := err
	if cause == nil {
		cause = res[0]
	}
	r.attempt++
	if p.failed(r, cause) {
		return retryAgain
	}
	return retryFinished // by failed
}
