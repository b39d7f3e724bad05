package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
	"github.com/keyshare/keyshare/coord"
)

// Records Kafka deleted before the member handled them.

// retention handles a fetch whose offset is no longer in the log: Kafka
// deleted the records (retention, DeleteRecords) before this member read
// them. librdkafka (auto.offset.reset=error) stops fetching the partition
// and its error does not say which partition, so every assigned partition
// whose fetch position is below its log start is handled: each owned range
// moves its ledger past the deleted records it had not handled and keeps a
// report of them, which the next flush writes to etcd in the same fenced
// transaction as the ledger (see docs/consumer.md, "Records lost to
// retention"). Then the partition is fetched again from its log start.
//
// A partition that has not failed yet is handled too if its position is
// below the log start: librdkafka may still hold some of its deleted
// records, fetched but not delivered. Those are reported lost rather than
// handled (the reassignment drops librdkafka's queue); nothing is skipped
// without a report.
//
// The log starts and ends are read in a goroutine (readLogBounds), all
// partitions at once, and retentionRead handles the answer in the fetch
// loop: asked one partition at a time on the fetch loop, up to 5 s each,
// the queries held back every assignment, revokes among them
// (reconcile.go). A call while a query runs asks for one more after it
// (a partition may have failed after the running query read its start).
func (p *pipeline) retention() {
	if p.queryingLog {
		p.queryAgain = true
		return
	}
	p.mu.Lock()
	parts := make([]tp, 0, len(p.mu.assigned))
	for t := range p.mu.assigned {
		parts = append(parts, t)
	}
	p.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	p.queryingLog = true
	p.goFunc(func() {
		b := p.c.readLogBounds(p.ctx, parts)
		select {
		case p.logBounds <- b:
		case <-p.ctx.Done():
		}
	})
}

// retentionRead handles the log starts and ends a retention query found
// (retention): each partition still assigned whose fetch position is
// below its log start loses its deleted records, with a report, and is
// fetched again from the log start.
func (p *pipeline) retentionRead(b logBounds) {
	p.queryingLog = false
	if p.queryAgain {
		p.queryAgain = false
		poke(p.retentionCh)
	}
	for t, err := range b.failed {
		p.log.Warn("read the log start after an offset-out-of-range error; will retry", "topic", t.Topic, "partition", t.Partition, "error", err, "partitions_failed", len(b.failed))
		p.retryRetention()
		break
	}
	var seeks []kafka.TopicPartition
	for t, low := range b.start {
		p.mu.Lock()
		at, ok := p.mu.pos[t]
		if !p.mu.assigned[t] || !ok {
			p.mu.Unlock()
			continue // no longer fetched here
		}
		if at >= low {
			p.mu.Unlock()
			p.checkAboveEnd(t, at, b.end[t])
			continue
		}
		if p.c.cfg.RetentionLoss == RetentionLossHalt {
			if !p.mu.halted[t] {
				p.mu.halted[t] = true
				p.log.Error("records were deleted from Kafka before they were handled; the partition is halted (RetentionLoss is \"halt\"): restart the members with RetentionLoss \"report\" to go on from the log start with a loss report",
					"topic", t.Topic, "partition", t.Partition, "position", at, "log_start", low)
			}
			p.mu.Unlock()
			continue
		}
		now := time.Now()
		for _, w := range p.mu.byTP[t] {
			if w.revoking {
				continue // its next owner finds the loss
			}
			loss, lost := w.st.Truncate(low)
			if !lost {
				continue
			}
			w.losses = append(w.losses, coord.LossReport{Loss: loss, At: now})
			p.log.Error("records were deleted from Kafka before they were handled; they are lost to retention and reported in etcd",
				"topic", t.Topic, "partition", t.Partition, "range", w.st.Range().String(),
				"lost_from", loss.Window(), "log_start", low, "known_pending_lost", loss.Known(),
				"report", p.sess.LossKey(w.rs, low))
		}
		p.mu.pos[t] = low
		p.mu.Unlock()
		topic := t.Topic
		seeks = append(seeks, kafka.TopicPartition{Topic: &topic, Partition: t.Partition, Offset: kafka.Offset(low)})
	}
	if len(seeks) == 0 {
		return
	}
	poke(p.flushCh)
	// librdkafka has stopped fetching these partitions and refuses a seek
	// (its fetch state is "none"): assign them again at the log start.
	if err := p.reassign(seeks); err != nil {
		p.log.Warn("restart partitions at the log start; will retry", "error", err)
		p.retryRetention()
	}
}

// logBounds are the log start and end offsets (high watermark) of
// partitions; failed are those Kafka gave no answer for.
type logBounds struct {
	start, end map[tp]int64
	failed     map[tp]error
}

// logBoundsTimeout bounds a retention query.
const logBoundsTimeout = 5 * time.Second

// readLogBounds reads the log start and end of parts: two ListOffsets
// requests per kafkaoffsets.Chunk partitions (and broker), sent at once,
// however many partitions there are. A partition missing from either
// answer is in failed.
func (c *Consumer) readLogBounds(ctx context.Context, parts []tp) logBounds {
	b := logBounds{failed: make(map[tp]error)}
	fail := func(err error) logBounds {
		for _, t := range parts {
			b.failed[t] = err
		}
		return b
	}
	a, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		return fail(fmt.Errorf("admin client: %w", err))
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(ctx, logBoundsTimeout)
	defer cancel()
	var (
		wg                       sync.WaitGroup
		startErr, endErr         error
		startRefused, endRefused map[tp]error
	)
	// The end is the high watermark, whatever the isolation level, as a
	// position above it is above anything the log holds (gaps.go).
	wg.Go(func() {
		b.start, startRefused, startErr = kafkaoffsets.List(ctx, a, parts, kafka.EarliestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	})
	wg.Go(func() {
		b.end, endRefused, endErr = kafkaoffsets.List(ctx, a, parts, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	})
	wg.Wait()
	if err := cmp.Or(startErr, endErr); err != nil {
		b.start, b.end = nil, nil
		return fail(fmt.Errorf("read log offsets of %d partitions: %w", len(parts), err))
	}
	for _, t := range parts {
		_, hasStart := b.start[t]
		_, hasEnd := b.end[t]
		switch err := cmp.Or(startRefused[t], endRefused[t]); {
		case err != nil:
			b.failed[t] = err
		case !hasStart || !hasEnd:
			b.failed[t] = errors.New("no answer")
		default:
			continue
		}
		delete(b.start, t)
	}
	return b
}

// retryRetention runs retention again after a pause, from the fetch loop.
func (p *pipeline) retryRetention() {
	p.goFunc(func() {
		sleep(p.ctx, time.Second)
		poke(p.retentionCh)
	})
}
