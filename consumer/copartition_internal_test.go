package consumer

import (
	"context"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// TestCoPartitionedRefused: a co-partitioned set is refused before any
// network when it is not two or more of the group's topics, or a topic is
// in two sets (Validate, through coord's check), and at start when its
// topics' partition counts differ, each naming the topics.
func TestCoPartitionedRefused(t *testing.T) {
	base := DefaultConfig()
	base.Group, base.Topics, base.Handler = "g", []string{"orders", "customers", "other"}, func(context.Context, *kafka.Message) error { return nil }
	base.Kafka = kafka.ConfigMap{"bootstrap.servers": "127.0.0.1:1"}
	for _, tc := range []struct {
		sets [][]string
		want string
	}{
		{[][]string{{"orders"}}, `co-partitioned set 1 ["orders"]: want two topics or more`},
		{[][]string{{"orders", "payments"}}, `co-partitioned topic "payments" is not one of the group's topics`},
		{[][]string{{"orders", "customers"}, {"other", "orders"}}, `topic "orders" is in co-partitioned sets 1 and 2`},
	} {
		cfg := base
		cfg.CoPartitioned = tc.sets
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: Validate: %v, want %q", tc.sets, err, tc.want)
		}
	}
	ok := base
	ok.CoPartitioned = [][]string{{"orders", "customers"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("a good set refused: %v", err)
	}
	err := checkCoPartitionCounts(ok.CoPartitioned, map[string]int32{"orders": 4, "customers": 3})
	if err == nil || !strings.Contains(err.Error(), `co-partitioned topics "orders" (4 partitions) and "customers" (3) have different partition counts`) {
		t.Errorf("partition counts 4 and 3: %v", err)
	}
	if err := checkCoPartitionCounts(ok.CoPartitioned, map[string]int32{"orders": 4, "customers": 4}); err != nil {
		t.Errorf("equal counts refused: %v", err)
	}
}
