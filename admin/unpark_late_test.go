package admin_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestUnparkPassesOverLateCopy: a key's two records are parked, and then
// a copy of its first lands in the parking partition behind them with an
// older fencing token, as one that a member which had lost the range
// wrote late. The unpark runs the two parked records, once each, in
// order, and passes over the late copy.
func TestUnparkPassesOverLateCopy(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders" + admin.ParkedSuffix: 1})
	var mu sync.Mutex
	var ran []string // "offset:value" of k's records, as handled
	handler := func(ctx context.Context, m *kafka.Message) error {
		if string(m.Key) == "k" {
			mu.Lock()
			ran = append(ran, strconv.Itoa(int(m.TopicPartition.Offset))+":"+string(m.Value))
			mu.Unlock()
		}
		return nil
	}
	ranSoFar := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), ran...)
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", handler)
	g, q := parkedKey(t, cli, k.Brokers, "1", "2")
	ctx := t.Context()
	if got := ranSoFar(); len(got) != 0 {
		t.Fatalf("k's records ran while parked: %v", got)
	}
	produceLateCopy(t, k.Brokers, "orders"+admin.ParkedSuffix)
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the unpark done", 30*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	if got := ranSoFar(); len(got) != 2 || got[0] != "1:1" || got[1] != "2:2" {
		t.Fatalf("k's records ran as %v; want [1:1 2:2]: the late copy of offset 1 passed over", got)
	}
}

// produceLateCopy writes into topic's partition 0 a parked copy of
// orders/0 offset 1, key k, under fencing token 1: below any token a
// member holds a range under (the revision of its range record).
func produceLateCopy(t *testing.T, brokers, topic string) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	done := make(chan kafka.Event, 1)
	err = p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte("k"), Value: []byte("late"),
		Headers: []kafka.Header{
			{Key: consumer.HeaderTopic, Value: []byte("orders")},
			{Key: consumer.HeaderPartition, Value: []byte("0")},
			{Key: consumer.HeaderOffset, Value: []byte("1")},
			{Key: consumer.HeaderFence, Value: []byte("1")},
		}}, done)
	if err != nil {
		t.Fatal(err)
	}
	if m := (<-done).(*kafka.Message); m.TopicPartition.Error != nil {
		t.Fatalf("the late copy: %v", m.TopicPartition.Error)
	}
}
