package consumer

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.opentelemetry.io/otel/trace"
)

// BatchHandler handles several records in one call, for a sink that pays a
// fixed cost per call (a database transaction, a bulk API). Set it in
// Config.BatchHandler instead of Config.Handler.
//
// A batch holds up to Config.MaxBatchSize records of any keys of the
// member's ranges, gathered for at most Config.MaxBatchWait, and is
// handed over in one call per range it holds records of, one call after
// another: a call carries the records of one range. Per-key order
// holds: a key's records in a batch are consecutive records of that key in
// offset order (batch order is offset order for each key; records of
// different keys are interleaved in no particular order), and a key is never
// in two batches at once, so a key's record is never handled before the
// batch holding its predecessor has returned.
//
// The handler returns one result per record, in batch order: results[i] is
// nil when batch[i] is done, an error when it failed. A nil slice means every
// record is done. Then, per record:
//
//   - nil: the record is done; it reaches the ledger at once.
//   - an error: the record failed this attempt. It is retried per
//     Config.Retry, on its own (in a smaller batch with the other records of
//     the batch that failed), after the backoff, and dead-lettered after
//     Retry.MaxAttempts as a single record would be.
//   - any result of a record that comes after a failed record of the same key
//     in the batch is discarded, nil or not, and does not count as an
//     attempt: the record runs again, in a later batch, once the failed one
//     is done or dead-lettered. A handler that must not apply such a record
//     twice should stop applying a key's records at its first failure in a
//     batch (and return an error for the rest of that key's records).
//
// A panic, or a slice whose length is not len(batch) (nor nil), fails every
// record of the batch (logged as an error, naming the lengths); nothing of
// it is marked done.
//
// ctx ends when the member must stop working on the call's records (their
// range was revoked past the drain timeout or dropped, or the session was
// lost). The handler should return promptly then. The records run again
// on their range's next owner; after a lost session, those of ranges the
// member still owns run again here, in a later batch (not counted as an
// attempt).
//
// The batch slice and its messages belong to the handler only until it
// returns.
type BatchHandler func(ctx context.Context, batch []*kafka.Message) []error

// FailAll returns n copies of err: the result of a BatchHandler whose whole
// batch of n records failed, e.g. return consumer.FailAll(len(batch), err).
func FailAll(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// callBatch runs the batch handler (attempt: that of a record retried
// alone, 1 for a batch), turning a panic or a result of the wrong length
// into an error for the whole batch.
func (c *Consumer) callBatch(ctx context.Context, msgs []*kafka.Message, attempt int) (res []error, err error) {
	if c.spans != nil {
		var span trace.Span
		ctx, span = c.spans.StartBatch(ctx, msgs, attempt)
		defer func() { c.spans.EndBatch(span, res, err) }() // after the recover below
	}
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("batch handler panicked: %v\n%s", r, debug.Stack())
		}
	}()
	if c.batchRecords != nil {
		c.batchRecords.Observe(float64(len(msgs)))
	}
	res = c.cfg.BatchHandler(ctx, msgs)
	if res == nil {
		return make([]error, len(msgs)), nil
	}
	if len(res) != len(msgs) {
		return nil, fmt.Errorf("%w: %d results for a batch of %d records (return one error per record, nil when done, in batch order, or a nil slice when all are done)", ErrBatchResults, len(res), len(msgs))
	}
	return res, nil
}

// groupCtx returns a context that ends when the session does or when the
// context of any of jobs ends, and that answers FenceOf for jobs, and its
// release function. A job's context that has ended already ends it before
// groupCtx returns: AfterFunc would end it from a goroutine of its own,
// after the handler may have started.
func (p *pipeline) groupCtx(jobs []*job) (context.Context, func()) {
	ctx, cancel := context.WithCancel(p.ctx)
	stops := make([]func() bool, len(jobs))
	for i, j := range jobs {
		stops[i] = context.AfterFunc(&j.ctx, cancel)
		if j.ctx.Err() != nil {
			cancel()
		}
	}
	return withFences(ctx, jobs), func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// contextsEnded reports for each of jobs whether its own context has ended.
// It reads them under p.mu: the records of a range are cancelled one by one
// under p.mu (abandonLocked, apply), and a batch's context ends at the first
// of them. Read without the lock, a record whose cancel had not come yet
// would look cancelled for another record's range and be put back, and run
// here again after its range's drain budget was spent, beside its next
// owner.
func (p *pipeline) contextsEnded(jobs []*job) []bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ended := make([]bool, len(jobs))
	for i, j := range jobs {
		ended[i] = j.ctx.Err() != nil
	}
	return ended
}

// startable returns the records of live that may start now, right before
// the BatchHandler's call: a skip's dead letter or a retry's wait may have
// come between the batch's first look and the call. A record whose
// context has ended (its range drained or dropped) is finished, pending
// for the range's next owner, read under p.mu as contextsEnded says; past
// the session's deadline none starts.
func (p *pipeline) startable(live []*job) []*job {
	ended := p.contextsEnded(live)
	alive := p.live()
	out := live[:0]
	for i, j := range live {
		if ended[i] || !alive {
			p.finishJob(j, false)
			continue
		}
		out = append(out, j)
	}
	return out
}

// finishJob is runJob's ending for a job of a batch.
func (p *pipeline) finishJob(j *job, done bool) {
	p.finish(j, done)
	j.cancel()
}

// runBatch runs on a batch-mode worker: it hands the batch's records to
// the BatchHandler, in one call per range (byRange), records each
// record's outcome, releases the keys that are not failing, then retries
// the failed records (holding their keys, and the later records of those
// keys it took) until each is done, dead-lettered or abandoned.
func (p *pipeline) runBatch(b *batch) {
	var live []*job
	alive := p.live()
	for _, j := range b.Jobs() {
		if j.ctx.Err() != nil || !alive {
			// Dropped with its range (or the session) while queued: it
			// stays pending for the range's next owner, as in runJob.
			p.finishJob(j, false)
			continue
		}
		live = append(live, j)
	}
	live, aside, wait := p.setAside(b, live) // park.go
	defer wait()
	putBack := make(map[jobKey][]*job)
	var failing []*retrying
	for _, group := range p.byRange(p.skipBatch(live)) {
		failed := p.callRange(group, putBack)
		failing = append(failing, failed...)
		failingKeys := make(map[jobKey]bool, len(failed))
		for _, r := range failed {
			failingKeys[r.j.key] = true
		}
		// Release the range's other keys now, not when the retries end.
		for _, j := range group {
			if !failingKeys[j.key] {
				b.Release(j.key, putBack[j.key])
			}
		}
	}
	failingKeys := make(map[jobKey]bool, len(failing))
	for _, r := range failing {
		failingKeys[r.j.key] = true
	}
	// The keys whose records all finished before a call. The batch's
	// keys do not change once it is formed; a key released twice is
	// released once.
	for _, k := range b.Keys() {
		if !failingKeys[k] && !aside[k] {
			b.Release(k, putBack[k])
		}
	}
	if len(failing) > 0 {
		p.retryBatch(b, failing, putBack)
	}
}

// byRange splits live, a batch's records in batch order, by the range
// that holds each now, keeping batch order in each part. One call per
// range: a range's drain, when its budget is spent, ends the call that
// carries its records, and a call carrying records of ranges the member
// keeps would end with it, and be sent again at once under the same
// fence while the endpoint may still work the first (an overlap, with
// no timeout to blame).
func (p *pipeline) byRange(live []*job) [][]*job {
	p.mu.Lock()
	defer p.mu.Unlock()
	var groups [][]*job
	at := make(map[*owned]int)
	for _, j := range live {
		w := currentRange(p.mu.byTP, j)
		i, ok := at[w]
		if !ok {
			i = len(groups)
			at[w] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], j)
	}
	return groups
}

// callRange hands group, the records of one range in batch order, to the
// BatchHandler in one call and records each one's outcome: done, failed
// (returned, to be retried), given back, or put back in putBack (a later
// record of a key that did not finish: it runs in a later batch, not
// counted as an attempt).
func (p *pipeline) callRange(group []*job, putBack map[jobKey][]*job) []*retrying {
	live := p.startable(group)
	if len(live) == 0 {
		return nil
	}
	msgs := make([]*kafka.Message, len(live))
	for i, j := range live {
		msgs[i] = j.m
	}
	ctx, done := p.groupCtx(live)
	start := time.Now()
	res, err := p.c.callBatch(ctx, msgs, 1)
	share := time.Since(start) / time.Duration(len(live)) // load.go
	cancelled := ctx.Err() != nil
	done()
	ended := p.contextsEnded(live)
	for _, j := range live {
		j.busy += share
	}
	if errors.Is(err, ErrBatchResults) {
		p.log.Error("BatchHandler returned the wrong number of results: every record of the batch counts as failed and is retried", "error", err)
	}
	// Outcomes, in batch order. blocked keys had a record that did not
	// finish: their later records in this call wait (their results are
	// discarded).
	blocked := make(map[jobKey]bool)
	var failing []*retrying
	for i, j := range live {
		switch {
		case blocked[j.key]:
			putBack[j.key] = append(putBack[j.key], j)
		case err == nil && res[i] == nil:
			p.c.metrics.handled.Add(1)
			p.finishJob(j, true)
		case ended[i]:
			// Its range was dropped or drained past its budget (or the
			// session ended): it runs again on the range's next owner.
			p.finishJob(j, false)
		case cancelled:
			// The call was cancelled, not for this record's range (the
			// session is ending): it runs again in a later batch; not
			// an attempt.
			blocked[j.key] = true
			putBack[j.key] = append(putBack[j.key], j)
		default:
			cause := err
			if cause == nil {
				cause = res[i]
			}
			blocked[j.key] = true
			r := &retrying{j: j, attempt: 1}
			if p.failed(r, cause) {
				failing = append(failing, r)
			}
			// Dead-lettered or abandoned: the key stays blocked all the
			// same, its later records in this call ran before that.
		}
	}
	return failing
}

// skipBatch applies the operators' skips set on records of live (a
// batch's records, in batch order, none of them parked) and returns the
// others, for the BatchHandler. A skipped record is finished by its skip,
// as in process; if the skip cannot be applied (the member must stop
// working on the record) its key's later records are left out too,
// unfinished, so that none overtakes it.
func (p *pipeline) skipBatch(live []*job) []*job {
	if !p.hasKeyOps() {
		return live
	}
	var held map[jobKey]bool
	out := live[:0]
	for _, j := range live {
		if held[j.key] {
			p.finishJob(j, false)
			continue
		}
		op, ok := p.skipFor(&j.ctx, j)
		if !ok {
			out = append(out, j)
			continue
		}
		err := p.skip(&j.ctx, j, op, 0)
		p.finishJob(j, err == nil)
		if err != nil {
			if held == nil {
				held = make(map[jobKey]bool)
			}
			held[j.key] = true
		}
	}
	return out
}
