package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
)

// selectedPartitions is every partition sel names, each once, in the
// order the selectors name them. It refuses a topic Kafka does not have
// and a partition beyond the topic's.
func (g *Group) selectedPartitions(sel []Selector) ([]kafka.TopicPartition, error) {
	var tps []kafka.TopicPartition
	seen := make(map[assign.TopicPartition]bool)
	// One metadata request per topic, however many selectors name it (a
	// --from-file plan names each partition).
	partitions := make(map[string]int32)
	for _, s := range sel {
		topic := s.Topic
		n, ok := partitions[topic]
		if !ok {
			md, err := g.kc.GetMetadata(&topic, false, kafkaTimeoutMs)
			if err != nil {
				return nil, fmt.Errorf("admin: read metadata of topic %q: %w", s.Topic, err)
			}
			tm, ok := md.Topics[s.Topic]
			if !ok || tm.Error.Code() != kafka.ErrNoError || len(tm.Partitions) == 0 {
				return nil, fmt.Errorf("%w: topic %q does not exist", ErrBadReset, s.Topic)
			}
			n = int32(len(tm.Partitions))
			partitions[topic] = n
		}
		if s.Partition >= n {
			return nil, fmt.Errorf("%w: topic %q has partitions 0-%d, not %d", ErrBadReset, s.Topic, n-1, s.Partition)
		}
		for p := range n {
			tp := assign.TopicPartition{Topic: s.Topic, Partition: p}
			if (s.Partition < 0 || s.Partition == p) && !seen[tp] {
				seen[tp] = true
				tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p})
			}
		}
	}
	return tps, nil
}

// offsetsOf reads the group's committed offsets of parts and the log start
// and end offsets, each in requests of kafkaoffsets.Chunk partitions sent
// at once: one synchronous call per partition was a round trip each.
func (g *Group) offsetsOf(ctx context.Context, parts []assign.TopicPartition) (committed, starts, ends map[assign.TopicPartition]int64, err error) {
	committed, refused, err := kafkaoffsets.Committed(g.kc, parts, kafkaTimeoutMs)
	if err == nil {
		err = kafkaoffsets.FirstRefused(refused)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("admin: read committed offsets of %q: %w", g.name, err)
	}
	a, err := kafka.NewAdminClientFromConsumer(g.kc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("admin: Kafka admin client: %w", err)
	}
	defer a.Close()
	lctx, cancel := context.WithTimeout(ctx, kafkaTimeoutMs*time.Millisecond)
	defer cancel()
	starts, refused, err = kafkaoffsets.List(lctx, a, parts, kafka.EarliestOffsetSpec, kafkaoffsets.Isolation(g.kcfg))
	if err == nil {
		err = kafkaoffsets.FirstRefused(refused)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("admin: read the log start offsets: %w", err)
	}
	ends, refused, err = kafkaoffsets.List(lctx, a, parts, kafka.LatestOffsetSpec, kafkaoffsets.Isolation(g.kcfg))
	if err == nil {
		err = kafkaoffsets.FirstRefused(refused)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("admin: read the log end offsets: %w", err)
	}
	return committed, starts, ends, nil
}

// offsetsAtTime is, for each of tps, the first offset at or after t.
func (g *Group) offsetsAtTime(tps []kafka.TopicPartition, t time.Time) ([]kafka.TopicPartition, error) {
	var times []kafka.TopicPartition
	for _, tp := range tps {
		times = append(times, kafka.TopicPartition{Topic: tp.Topic, Partition: tp.Partition, Offset: kafka.Offset(t.UnixMilli())})
	}
	times, err := g.kc.OffsetsForTimes(times, kafkaTimeoutMs)
	if err != nil {
		return nil, fmt.Errorf("admin: offsets for %s: %w", t.Format(time.RFC3339), err)
	}
	return times, nil
}
