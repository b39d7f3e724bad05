package consumer

import (
	"context"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/coord"
)

// commitLoop runs on the leader: every CommitInterval it computes each
// partition's safe watermark from the ledger and commits it to Kafka for the
// group. The offset is first recorded in etcd under the leader's guard (so a
// deposed leader cannot record, and a new leader starts from it), then
// committed to Kafka. It never commits below what etcd or Kafka already
// hold, so the committed offset never goes backwards.
func (c *Consumer) commitLoop(ctx context.Context, l *coord.Leader) {
	// What Kafka holds at takeover: a group migrating from a plain
	// consumer group may be ahead of anything keyshare recorded.
	kafkaAt := make(map[tp]int64)
	known := make(map[tp]bool) // partitions whose kafkaAt is read
	t := time.NewTicker(c.cfg.CommitInterval)
	defer t.Stop()
	defer func() {
		c.mu.Lock()
		c.mu.partitions = nil // only the leader knows these
		c.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.commitRound(ctx, l, kafkaAt, known)
	}
}

// commitRound is one round of commitLoop. Each etcd request is bounded by
// EtcdTimeout; what does not finish is done again next round.
func (c *Consumer) commitRound(ctx context.Context, l *coord.Leader, kafkaAt map[tp]int64, known map[tp]bool) {
	log := c.log.Named("commit")
	rctx, cancel := context.WithTimeout(ctx, c.cfg.EtcdTimeout)
	snap, err := l.Snapshot(rctx)
	cancel()
	if err != nil {
		log.Warn("read ledger", "error", err)
		return
	}
	marks := snap.Watermarks()
	for part, w := range marks {
		if !known[part] {
			kafkaAt[part] = c.kafkaCommitted(part)
			known[part] = true
		}
		rec, hasRec := snap.Commits[part]
		floor := kafkaAt[part]
		if hasRec && rec.Offset > floor {
			floor = rec.Offset
		}
		// The offset to hold in Kafka: the new watermark once etcd
		// holds it, else what etcd already holds (a record whose
		// answer was lost may be ahead of Kafka).
		target := floor
		if w > floor {
			prevRev := int64(0)
			if hasRec {
				prevRev = snap.CommitRevs[part]
			}
			rctx, cancel := context.WithTimeout(ctx, c.cfg.EtcdTimeout)
			_, err := l.RecordCommit(rctx, part, prevRev, w)
			cancel()
			if err != nil {
				log.Warn("record commit in etcd; not committing to Kafka", "topic", part.Topic, "partition", part.Partition, "offset", w, "error", err)
				continue
			}
			target = w
		}
		if target <= kafkaAt[part] {
			continue
		}
		topic := part.Topic
		if _, err := c.kc.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: part.Partition, Offset: kafka.Offset(target)}}); err != nil {
			// etcd holds it; the next round commits again.
			log.Warn("commit to Kafka", "topic", part.Topic, "partition", part.Partition, "offset", target, "error", err)
			known[part] = false
			continue
		}
		kafkaAt[part] = target
		c.metrics.commits.Add(1)
		log.Debug("committed", "topic", part.Topic, "partition", part.Partition, "offset", target)
	}
	c.updatePartitionGauges(marks, kafkaAt)
}

// updatePartitionGauges records each partition's end offset, safe watermark
// and committed offset for the metrics.
func (c *Consumer) updatePartitionGauges(marks map[tp]int64, committed map[tp]int64) {
	g := make(map[tp]partitionGauges, len(marks))
	for part, w := range marks {
		_, end, err := c.kc.QueryWatermarkOffsets(part.Topic, part.Partition, 2000)
		if err != nil {
			continue
		}
		g[part] = partitionGauges{end: end, safe: w, committed: committed[part]}
	}
	c.mu.Lock()
	c.mu.partitions = g
	c.mu.Unlock()
}

// kafkaCommitted reads the group's committed offset of a partition (-1 if
// none or unreadable).
func (c *Consumer) kafkaCommitted(part tp) int64 {
	topic := part.Topic
	res, err := c.kc.Committed([]kafka.TopicPartition{{Topic: &topic, Partition: part.Partition}}, int(c.cfg.StartTimeout/time.Millisecond))
	if err != nil || len(res) != 1 || res[0].Offset < 0 {
		return -1
	}
	return int64(res[0].Offset)
}
