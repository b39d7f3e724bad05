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
	log := c.log.Named("commit")
	// What Kafka holds at takeover: a group migrating from a plain
	// consumer group may be ahead of anything keyshare recorded.
	kafkaAt := make(map[tp]int64)
	var known map[tp]bool
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
		snap, err := l.Snapshot(ctx)
		if err != nil {
			log.Warn("read ledger", "error", err)
			continue
		}
		marks := snap.Watermarks()
		if known == nil {
			known = make(map[tp]bool)
		}
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
			if w <= floor {
				continue
			}
			prevRev := int64(0)
			if hasRec {
				prevRev = snap.CommitRevs[part]
			}
			if _, err := l.RecordCommit(ctx, part, prevRev, w); err != nil {
				log.Warn("record commit in etcd; not committing to Kafka", "topic", part.Topic, "partition", part.Partition, "offset", w, "error", err)
				continue
			}
			topic := part.Topic
			if _, err := c.kc.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: part.Partition, Offset: kafka.Offset(w)}}); err != nil {
				// etcd holds it; the next round commits again.
				log.Warn("commit to Kafka", "topic", part.Topic, "partition", part.Partition, "offset", w, "error", err)
				known[part] = false
				continue
			}
			kafkaAt[part] = w
			c.metrics.commits.Add(1)
			log.Debug("committed", "topic", part.Topic, "partition", part.Partition, "offset", w)
		}
		c.updatePartitionGauges(marks, kafkaAt)
	}
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
