package admin_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// TestUnparkWhileParkingFails: key k is parked and its first record is
// parked; its second is too large for the parking topic, so its owner
// writes it again and again. The key is then unparked: the parked record
// runs first, then the one that could not be parked, each once.
func TestUnparkWhileParkingFails(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testUnparkWhileParkingFails(t, false) })
	t.Run("batch", func(t *testing.T) { testUnparkWhileParkingFails(t, true) })
}

func testUnparkWhileParkingFails(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.park": 1})
	setTopicConfig(t, k.Brokers, "orders.park", "max.message.bytes", "10000")
	var handled handledLog
	h := func(_ context.Context, m *kafka.Message) error {
		handled.add(m)
		return nil
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", h, batchMode(batch, h))
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the member at work", 30*time.Second, func() bool { return len(handled.of("other")) == 1 })
	op, err := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, ParkTopic: "orders.park", By: "ops@test"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: []byte("small"), Partition: 0}})
	testutil.WaitFor(t, "the first record parked", 30*time.Second, func() bool {
		return len(parked(t, k.Brokers, op.ParkTopic, op.ParkFrom, "k")) == 1
	})
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: bytes.Repeat([]byte("b"), 20_000), Partition: 0}})
	time.Sleep(time.Second) // its parking fails and is tried again
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "both records of k handled", 30*time.Second, func() bool { return len(handled.of("k")) >= 2 })
	time.Sleep(300 * time.Millisecond) // any record handled twice
	if got := handled.of("k"); !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("k handled at %v; want [1 2]: its parked record before the one that could not be parked", got)
	}
}

// setTopicConfig sets one configuration of topic.
func setTopicConfig(t *testing.T, brokers, topic, key, value string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := a.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{
		Type: kafka.ResourceTopic, Name: topic,
		Config: []kafka.ConfigEntry{{Name: key, Value: value, IncrementalOperation: kafka.AlterConfigOpTypeSet}},
	}})
	if err != nil {
		t.Fatalf("set %s=%s on %s: %v", key, value, topic, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("set %s=%s on %s: %v", key, value, topic, r.Error)
		}
	}
}

// TestUnparkPreludeStopsAtDrainBudget: two keys, one in each half of the
// partition's hash space, are parked with a record their handler always
// fails (no dead-letter topic), then unparked: with no live record, each
// prelude runs on its own, retrying. A second member joins and takes one
// half. Once the drain budget is spent and the range released, the first
// member no longer calls the handler on the moved key's record: its next
// owner runs it now.
func TestUnparkPreludeStopsAtDrainBudget(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	var mu sync.Mutex
	attempts := map[string]int{} // by member and key
	handler := func(member string) consumer.Handler {
		return func(_ context.Context, m *kafka.Message) error {
			if string(m.Value) != "bad" {
				return nil
			}
			mu.Lock()
			attempts[member+"/"+string(m.Key)]++
			mu.Unlock()
			return errors.New("cannot handle it")
		}
	}
	attemptsOf := func(member, key string) int {
		mu.Lock()
		defer mu.Unlock()
		return attempts[member+"/"+key]
	}
	low, high := "", ""
	for i := 0; low == "" || high == ""; i++ {
		key := "key-" + strconv.Itoa(i)
		if ledger.Hash([]byte(key), 0) < 1<<31 {
			low = cmp.Or(low, key)
		} else {
			high = cmp.Or(high, key)
		}
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", handler("m1"))
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the commit past the first record", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 1
	})
	ops := map[string]admin.KeyOp{}
	for _, key := range []string{low, high} {
		q := admin.KeyQuery{Topic: "orders", Key: []byte(key), Partition: 0}
		if ops[key], err = g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, ParkTopic: "orders.park-" + key, By: "ops@test"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the parks
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte(low), Value: []byte("bad"), Partition: 0}, {Key: []byte(high), Value: []byte("bad"), Partition: 0}})
	for _, key := range []string{low, high} {
		testutil.WaitFor(t, key+" parked", 30*time.Second, func() bool {
			return len(parked(t, k.Brokers, ops[key].ParkTopic, ops[key].ParkFrom, key)) == 1
		})
		if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: admin.KeyQuery{Topic: "orders", Key: []byte(key), Partition: 0}, By: "ops@test"}); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, key+"'s parked record retried", 30*time.Second, func() bool { return attemptsOf("m1", key) > 1 })
	}
	startMember(t, e.Endpoints, k.Brokers, "m2", handler("m2"))
	moved := ""
	testutil.WaitFor(t, "a key's prelude running on m2", 30*time.Second, func() bool {
		for _, key := range []string{low, high} {
			if attemptsOf("m2", key) > 0 {
				moved = key
				return true
			}
		}
		return false
	})
	before := attemptsOf("m1", moved)
	time.Sleep(time.Second) // retries every 100ms at most
	if after := attemptsOf("m1", moved); after != before {
		t.Errorf("m1 called the handler on %s's parked record %d more times after its range moved to m2 (which runs it)", moved, after-before)
	}
}
