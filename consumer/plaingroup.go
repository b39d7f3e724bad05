package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ErrPlainGroupLive means the group id has live members of a plain Kafka
// consumer group (classic or KIP-848 protocol). keyshare commits the group's
// offsets itself; two writers would fight over them, so it refuses to start.
var ErrPlainGroupLive = errors.New("consumer: the group id has live members of a plain Kafka consumer group")

// checkPlainGroup refuses to start while the group id is in use by a plain
// Kafka consumer group with members. A group that only holds committed
// offsets (no members) is fine: keyshare starts where it left off, which is
// how a group moves to keyshare (docs/consumer.md, "Moving from a plain
// consumer group").
func (c *Consumer) checkPlainGroup(ctx context.Context) error {
	ac, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		return fmt.Errorf("consumer: admin client: %w", err)
	}
	defer ac.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	res, err := ac.DescribeConsumerGroups(ctx, []string{c.cfg.Group})
	if err != nil {
		return fmt.Errorf("consumer: describe Kafka consumer group %q within %s: %w; keyshare checks that no plain consumer group uses its group id (the principal needs Describe on the group)", c.cfg.Group, c.cfg.StartTimeout, err)
	}
	for _, d := range res.ConsumerGroupDescriptions {
		switch d.Error.Code() {
		case kafka.ErrNoError:
		case kafka.ErrGroupIDNotFound:
			continue // never used, or only by standalone commits
		default:
			return fmt.Errorf("consumer: describe Kafka consumer group %q: %w", c.cfg.Group, d.Error)
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
		return fmt.Errorf("%w: %q has %d (%s; group state %s): stop them first (keyshare then starts from their committed offsets), or choose another group name (Config.Group, --group)",
			ErrPlainGroupLive, c.cfg.Group, len(d.Members), strings.Join(who, ", "), d.State)
	}
	return nil
}
