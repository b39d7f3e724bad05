package consumer

import (
	"context"
	"errors"
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
//
// A deposed leader can still commit to Kafka (Kafka knows nothing of etcd's
// guard): one that stalled between recording an offset in etcd and
// committing it may commit it late, below what this leader committed since.
// So every round rereads what Kafka holds, for all partitions in one
// request, and commits etcd's offset again where Kafka is below it.
func (c *Consumer) commitLoop(ctx context.Context, l *coord.Leader) {
	// What Kafka holds, as last read or committed: a group migrating from a
	// plain consumer group may be ahead of anything keyshare recorded.
	kafkaAt := make(map[tp]int64)
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
		c.commitRound(ctx, l, kafkaAt)
	}
}

// commitRound is one round of commitLoop. Each etcd request is bounded by
// EtcdTimeout; what does not finish is done again next round.
func (c *Consumer) commitRound(ctx context.Context, l *coord.Leader, kafkaAt map[tp]int64) {
	log := c.log.Named("commit")
	rctx, cancel := context.WithTimeout(ctx, c.cfg.EtcdTimeout)
	snap, err := l.Snapshot(rctx)
	cancel()
	if err != nil {
		log.Warn("read ledger", "error", err)
		return
	}
	marks := snap.Watermarks()
	before := make(map[tp]int64, len(kafkaAt))
	for part, o := range kafkaAt {
		before[part] = o
	}
	c.readCommitted(marks, kafkaAt)
	for part, w := range marks {
		held, read := kafkaAt[part]
		if !read {
			continue // Kafka's offset unknown: committing could move it back
		}
		rec, hasRec := snap.Commits[part]
		floor := held
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
		if target <= held {
			continue
		}
		// A repair: Kafka holds less than etcd recorded, and less than this
		// leader last knew it to hold (or it never knew: a takeover).
		last, knew := before[part]
		repair := hasRec && held < rec.Offset && (!knew || held < last)
		topic := part.Topic
		if err := commitErr(c.kc.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: part.Partition, Offset: kafka.Offset(target)}})); err != nil {
			// etcd holds it; the next round reads Kafka and commits again.
			if plainGroupLive(err) {
				log.Error("Kafka refuses keyshare's commits: a plain Kafka consumer group with live members uses this group id, and it would fight keyshare over the committed offset; stop it (keyshare goes on committing once it has gone)",
					"group", c.cfg.Group, "topic", part.Topic, "partition", part.Partition, "offset", target, "error", err)
			} else {
				log.Warn("commit to Kafka", "topic", part.Topic, "partition", part.Partition, "offset", target, "error", err)
			}
			continue
		}
		kafkaAt[part] = target
		c.metrics.commits.Add(1)
		if repair {
			c.metrics.commitRepairs.Add(1)
			log.Warn("Kafka's committed offset was below the offset recorded in etcd (a deposed leader's late commit, or one that stopped between the two); committed etcd's again",
				"topic", part.Topic, "partition", part.Partition, "kafka_had", held, "etcd", rec.Offset, "committed", target)
		}
		log.Debug("committed", "topic", part.Topic, "partition", part.Partition, "offset", target)
	}
	c.updatePartitionGauges(marks, kafkaAt)
}

// readCommitted reads the group's committed offsets of the partitions in
// marks into kafkaAt (-1 where none), in one request. A partition that
// cannot be read keeps its last known value.
func (c *Consumer) readCommitted(marks map[tp]int64, kafkaAt map[tp]int64) {
	if len(marks) == 0 {
		return
	}
	parts := make([]kafka.TopicPartition, 0, len(marks))
	for part := range marks {
		topic := part.Topic
		parts = append(parts, kafka.TopicPartition{Topic: &topic, Partition: part.Partition})
	}
	res, err := c.kc.Committed(parts, int(c.cfg.StartTimeout/time.Millisecond))
	var kerr kafka.Error
	if errors.As(err, &kerr) && kerr.Code() == kafka.ErrGroupIDNotFound {
		// The group has never committed (some brokers say so this way).
		res, err = parts, nil
		for i := range res {
			res[i].Offset = kafka.OffsetInvalid
		}
	}
	if err != nil {
		c.log.Named("commit").Warn("read Kafka's committed offsets; using the last known", "partitions", len(parts), "error", err)
		return
	}
	for _, r := range res {
		if r.Topic == nil || r.Error != nil {
			continue
		}
		o := int64(r.Offset)
		if o < 0 {
			o = -1
		}
		kafkaAt[tp{Topic: *r.Topic, Partition: r.Partition}] = o
	}
}

// updatePartitionGauges records each partition's end offset, safe watermark
// and committed offset for the metrics. End offsets come from librdkafka's
// cache of the partitions this member fetches (no broker call); the others
// are asked for in one request.
func (c *Consumer) updatePartitionGauges(marks map[tp]int64, committed map[tp]int64) {
	g := make(map[tp]partitionGauges, len(marks))
	ask := make(map[kafka.TopicPartition]kafka.OffsetSpec)
	for part, w := range marks {
		if _, end, err := c.kc.GetWatermarkOffsets(part.Topic, part.Partition); err == nil && end >= 0 {
			g[part] = partitionGauges{end: end, safe: w, committed: committed[part]}
			continue
		}
		topic := part.Topic
		ask[kafka.TopicPartition{Topic: &topic, Partition: part.Partition}] = kafka.LatestOffsetSpec
	}
	if len(ask) > 0 {
		c.queryEnds(ask, func(part tp, end int64) {
			g[part] = partitionGauges{end: end, safe: marks[part], committed: committed[part]}
		})
	}
	c.mu.Lock()
	c.mu.partitions = g
	c.mu.Unlock()
}

// queryEnds asks the brokers for the end offsets of parts in one request.
func (c *Consumer) queryEnds(parts map[kafka.TopicPartition]kafka.OffsetSpec, found func(tp, int64)) {
	a, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	res, err := a.ListOffsets(ctx, parts)
	if err != nil {
		return
	}
	for k, r := range res.ResultInfos {
		if k.Topic != nil && r.Error.Code() == kafka.ErrNoError && r.Offset >= 0 {
			found(tp{Topic: *k.Topic, Partition: k.Partition}, int64(r.Offset))
		}
	}
}

// commitErr is the error of a CommitOffsets call: the call's own, or the
// first partition's.
func commitErr(res []kafka.TopicPartition, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}

// plainGroupLive reports whether a commit was refused because the group id
// has live members of a plain consumer group: the coordinator accepts a
// standalone commit (no member id, no generation) only for a group with no
// members.
func plainGroupLive(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration, kafka.ErrStaleMemberEpoch, kafka.ErrRebalanceInProgress:
		return true
	}
	return false
}
