package consumer

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
)

// deleteDroppedPartitionOffsets deletes the group's Kafka offsets of the
// partitions of a recreated topic at or above n, its new partition count:
// partitions the old topic had and the new one has not. Apache Kafka drops
// a deleted topic's group offsets itself, but a broker that keeps them
// would start partitions added to the topic later at the old log's
// offsets, skipping their first records. It lists the group's offsets (one
// OffsetFetch) and deletes those (one OffsetDelete), so on a broker that
// dropped them it deletes nothing. A failure is logged, with the command
// that deletes them by hand, and does not hold up the topic's fresh start:
// the next round of the reset tries again.
func (t topicIDs) deleteDroppedPartitionOffsets(ctx context.Context, a *kafka.AdminClient, topic string, n int32) {
	group := t.c.cfg.Group
	res, err := a.ListConsumerGroupOffsets(ctx, []kafka.ConsumerGroupTopicPartitions{{Group: group}})
	if err != nil {
		t.c.log.Warn("list the group's Kafka offsets, to delete those of partitions the recreated topic no longer has; trying again next round", "topic", topic, "error", err)
		return
	}
	var drop []tp
	for _, g := range res.ConsumerGroupsTopicPartitions {
		for _, p := range g.Partitions {
			if p.Topic != nil && *p.Topic == topic && p.Partition >= n && p.Offset >= 0 {
				drop = append(drop, tp{Topic: topic, Partition: p.Partition})
			}
		}
	}
	if len(drop) == 0 {
		return
	}
	slices.SortFunc(drop, func(a, b tp) int { return int(a.Partition - b.Partition) })
	refused, err := kafkaoffsets.Delete(ctx, kafkaConfig(t.c.cfg), group, drop)
	if err == nil && len(refused) > 0 {
		for p, e := range refused {
			err = fmt.Errorf("%s/%d: %w", p.Topic, p.Partition, e)
			break
		}
	}
	nums := make([]string, len(drop))
	for i, p := range drop {
		nums[i] = fmt.Sprint(p.Partition)
	}
	if err != nil {
		t.c.log.Error("the broker kept the group's offsets of partitions the recreated topic no longer has, and refused to delete them: partitions added to the topic later would start at the old log's offsets; delete them by hand",
			"topic", topic, "partitions", strings.Join(nums, ","), "error", err,
			"command", fmt.Sprintf("kafka-consumer-groups --bootstrap-server BROKERS --group %s --delete-offsets --topic %s:%s", group, topic, strings.Join(nums, ",")))
		return
	}
	t.c.log.Info("deleted the group's offsets of partitions the recreated topic no longer has", "topic", topic, "partitions", strings.Join(nums, ","))
}
