package consumer

import (
	"context"
	"fmt"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// checkPlainGroup refuses to start while the group id is in use by a plain
// Kafka consumer group with members. A group that only holds committed
// offsets (no members) is fine: keyshare starts where it left off, which is
// how a group moves to keyshare (docs/consumer.md, "Moving from a plain
// consumer group").
//
// Describing the group is retried while the broker cannot answer yet: a
// broker that has just started answers NOT_COORDINATOR for a while.
func (c *Consumer) checkPlainGroup(ctx context.Context) error {
	ac, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		return fmt.Errorf("consumer: admin client: %w", err)
	}
	defer ac.Close()
	return c.retry(ctx, fmt.Sprintf("describe Kafka consumer group %q", c.cfg.Group), func(ctx context.Context) error {
		return c.describePlainGroup(ctx, ac)
	})
}

// describePlainGroup is one attempt of checkPlainGroup.
func (c *Consumer) describePlainGroup(ctx context.Context, ac *kafka.AdminClient) error {
	res, err := ac.DescribeConsumerGroups(ctx, []string{c.cfg.Group})
	if err != nil {
		return fmt.Errorf("consumer: describe Kafka consumer group %q (keyshare checks that no plain consumer group uses its group id): %w", c.cfg.Group, explainKafka(err))
	}
	for _, d := range res.ConsumerGroupDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
		case kafka.ErrGroupIDNotFound:
			continue // never used, or only by standalone commits
		default:
			return fmt.Errorf("consumer: describe Kafka consumer group %q: %w", c.cfg.Group, explainKafka(d.Error))
		}
		if len(d.Members) == 0 {
			continue
		}
		var who []string
		for i, m := range d.Members {
			if i == 3 {
				who = append(who, fmt.Sprintf("and %d more", len(d.Members)-3))
				break
			}
			who = append(who, fmt.Sprintf("client %q on %s", m.ClientID, m.Host))
		}
		return final(fmt.Errorf("%w: %q has %d (%s; group state %s): stop them first (keyshare then starts from their committed offsets), or choose another group name (Config.Group, --group)",
			ErrPlainGroupLive, c.cfg.Group, len(d.Members), strings.Join(who, ", "), d.State))
	}
	return nil
}
