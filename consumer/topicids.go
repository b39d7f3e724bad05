package consumer

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
	"github.com/keyshare/keyshare/coord"
)

// topicIDs is the leader's view of Kafka's topic ids (coord.TopicIDSource),
// through the member's Kafka client: one DescribeTopics request for all
// topics, and DeleteConsumerGroupOffsets when a recreated topic starts
// afresh.
type topicIDs struct{ c *Consumer }

func (t topicIDs) admin() (*kafka.AdminClient, error) {
	a, err := kafka.NewAdminClientFromConsumer(t.c.kc)
	if err != nil {
		return nil, fmt.Errorf("consumer: admin client: %w", err)
	}
	return a, nil
}

// IDs returns each readable topic's id.
func (t topicIDs) IDs(ctx context.Context, topics []string) (map[string]string, error) {
	descs, err := t.c.describeTopics(ctx, topics)
	if err != nil {
		return nil, fmt.Errorf("consumer: describe topics %v: %w", topics, err)
	}
	out := make(map[string]string, len(topics))
	for _, d := range descs {
		if d.TopicID.GetMostSignificantBits() == 0 && d.TopicID.GetLeastSignificantBits() == 0 {
			continue
		}
		out[d.Name] = d.TopicID.String()
	}
	return out, nil
}

// ResetOffsets commits, for every partition of topic, the offset a new
// group would start at (auto.offset.reset: the log start, or its end):
// ListOffsets and standalone commits, each in requests of
// kafkaoffsets.Chunk partitions sent at once. It deletes the group's
// offsets of partitions the topic no longer has (recreate.go).
func (t topicIDs) ResetOffsets(ctx context.Context, topic string) error {
	counts, err := t.c.partitionCounts(ctx, []string{topic})
	if err != nil {
		return err
	}
	n := counts[topic]
	if n <= 0 {
		return fmt.Errorf("consumer: topic %q has no partitions now", topic)
	}
	spec := kafka.EarliestOffsetSpec
	if t.c.cfg.AutoOffsetReset == OffsetLatest {
		spec = kafka.LatestOffsetSpec
	}
	parts := make([]tp, n)
	for p := range n {
		parts[p] = tp{Topic: topic, Partition: p}
	}
	a, err := t.admin()
	if err != nil {
		return err
	}
	defer a.Close()
	offsets, refused, err := kafkaoffsets.List(ctx, a, parts, spec, kafkaoffsets.Isolation(t.c.cfg.Kafka))
	if err != nil {
		return fmt.Errorf("consumer: list offsets of %q: %w", topic, explainKafka(err))
	}
	if err := kafkaoffsets.FirstRefused(refused); err != nil {
		return fmt.Errorf("consumer: list offsets: %w", explainKafka(err))
	}
	var commit []kafka.TopicPartition
	for _, p := range parts {
		o, ok := offsets[p]
		if !ok {
			return fmt.Errorf("consumer: list offsets of %s/%d: no answer", topic, p.Partition)
		}
		commit = append(commit, kafka.TopicPartition{Topic: &topic, Partition: p.Partition, Offset: kafka.Offset(o)})
	}
	kafkaoffsets.SetMetadata(commit, coord.CommitMark(t.c.cfg.MemberID))
	err = kafkaoffsets.InChunks(commit, func(c []kafka.TopicPartition) error {
		return commitErr(t.c.kc.CommitOffsets(c))
	})
	if err != nil {
		return fmt.Errorf("consumer: commit the start offsets of %q: %w", topic, explainKafka(err))
	}
	t.deleteDroppedPartitionOffsets(ctx, a, topic, n)
	return nil
}

// HasOffsets reports whether the group holds a committed offset in Kafka
// for any partition the topic has now (one OffsetFetch request of
// kafkaoffsets.Chunk partitions at a time).
func (t topicIDs) HasOffsets(ctx context.Context, topic string) (bool, error) {
	counts, err := t.c.partitionCounts(ctx, []string{topic})
	if err != nil {
		return false, err
	}
	parts := make([]tp, counts[topic])
	for p := range parts {
		parts[p] = tp{Topic: topic, Partition: int32(p)}
	}
	offsets, refused, err := kafkaoffsets.Committed(t.c.kc, parts, timeoutMs(ctx, t.c.cfg.StartTimeout))
	if err == nil {
		err = kafkaoffsets.FirstRefused(refused)
	}
	if err != nil {
		return false, fmt.Errorf("consumer: read the group's committed offsets of %q: %w", topic, explainKafka(err))
	}
	for _, o := range offsets {
		if o >= 0 {
			return true, nil
		}
	}
	return false, nil
}
