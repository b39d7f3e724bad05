package consumer

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

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
func (p *pipeline) retention() {
	p.mu.Lock()
	pos := make(map[tp]int64, len(p.mu.pos))
	for t := range p.mu.assigned {
		pos[t] = p.mu.pos[t]
	}
	p.mu.Unlock()
	var seeks []kafka.TopicPartition
	for t, at := range pos {
		low, high, err := p.kc.QueryWatermarkOffsets(t.Topic, t.Partition, 5000)
		if err != nil {
			p.log.Warn("read the log start after an offset-out-of-range error; will retry", "topic", t.Topic, "partition", t.Partition, "error", err)
			p.retryRetention()
			continue
		}
		if at >= low {
			p.checkAboveEnd(t, at, high)
			continue
		}
		p.mu.Lock()
		if p.c.cfg.RetentionLoss == "halt" {
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

// retryRetention runs retention again after a pause, from the fetch loop.
func (p *pipeline) retryRetention() {
	p.goFunc(func() {
		sleep(p.ctx, time.Second)
		poke(p.retentionCh)
	})
}
