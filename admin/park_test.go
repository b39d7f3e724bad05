package admin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// stream produces records of keys key-0 … key-(keys-1) to partition 0 of
// topic until stop is called, and then returns each key's offsets.
type stream struct {
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	sent   map[string][]int64
	err    error
}

func startStream(t *testing.T, brokers, topic string, keys int) *stream {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{stopCh: make(chan struct{}), done: make(chan struct{}), sent: map[string][]int64{}}
	go func() {
		defer close(s.done)
		defer p.Close()
		reports := make(chan kafka.Event, 64)
		for i := 0; ; i++ {
			select {
			case <-s.stopCh:
				return
			default:
			}
			for j := range 8 {
				key := fmt.Sprintf("key-%d", (i*8+j)%keys)
				if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0}, Key: []byte(key), Value: []byte("v")}, reports); err != nil {
					s.fail(err)
					return
				}
			}
			for range 8 {
				m := (<-reports).(*kafka.Message)
				if m.TopicPartition.Error != nil {
					s.fail(m.TopicPartition.Error)
					return
				}
				s.mu.Lock()
				s.sent[string(m.Key)] = append(s.sent[string(m.Key)], int64(m.TopicPartition.Offset))
				s.mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return s
}

func (s *stream) fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// stop ends the stream and returns each key's offsets, in order.
func (s *stream) stop(t *testing.T) map[string][]int64 {
	t.Helper()
	close(s.stopCh)
	<-s.done
	if s.err != nil {
		t.Fatalf("stream: %v", s.err)
	}
	for k := range s.sent {
		slices.Sort(s.sent[k])
	}
	return s.sent
}

// parked reads the parking topic's partition 0 from offset from to its
// end and returns the origin offsets of key's records, in parking order,
// checking each one's origin headers.
func parked(t *testing.T, brokers, topic string, from int64, key string) []int64 {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "reader", "log_level": 3, "enable.partition.eof": true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.Offset(from)}}); err != nil {
		t.Fatal(err)
	}
	var out []int64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		switch e := c.Poll(100).(type) {
		case *kafka.Message:
			if string(e.Key) != key || header(e, consumer.HeaderTopic) != "orders" || header(e, consumer.HeaderPartition) != "0" {
				t.Errorf("parked record at %d: key %q, origin %s/%s; want %s of orders/0", e.TopicPartition.Offset, e.Key,
					header(e, consumer.HeaderTopic), header(e, consumer.HeaderPartition), key)
			}
			o, err := strconv.ParseInt(header(e, consumer.HeaderOffset), 10, 64)
			if err != nil {
				t.Fatalf("parked record without its origin offset: %v", err)
			}
			out = append(out, o)
		case kafka.PartitionEOF:
			return out
		}
	}
	t.Fatalf("parking topic %s not read to its end in 20s", topic)
	return nil
}

// TestParkUnparkWhileRangesMove: records of eight keys stream to one
// partition while key-3 is parked. A second member joins and leaves while
// it is parked, so the key's range is handed over and back; then key-3 is
// unparked. The records parked follow the ones handled before the park,
// in the parking topic in their original order with their origin in the
// headers; key-3's records were handled each once, in order (the parked
// ones when unparked, before the later ones); every other key's records
// were handled once each, in order; the committed offset reached the end.
// Bad parks and unparks are refused naming the value. The same with a
// BatchHandler, whose records take other paths through a member.
func TestParkUnparkWhileRangesMove(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testParkUnpark(t, false) })
	t.Run("batch", func(t *testing.T) { testParkUnpark(t, true) })
}

func testParkUnpark(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "payments.park": 1})
	var handled handledLog
	h := func(_ context.Context, m *kafka.Message) error {
		handled.add(m)
		return nil
	}
	mode := batchMode(batch, h)
	startMember(t, e.Endpoints, k.Brokers, "m1", h, mode)
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	s := startStream(t, k.Brokers, "orders", 8)
	testutil.WaitFor(t, "key-3 handled", 30*time.Second, func() bool { return len(handled.of("key-3")) >= 5 })

	q := admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0}
	for _, tc := range []struct {
		r    admin.ParkRequest
		want string
	}{
		{admin.ParkRequest{KeyQuery: q, ParkTopic: "orders"}, `parking topic "orders" is the key's own topic`},
		{admin.ParkRequest{KeyQuery: q, ParkTopic: "a/b"}, `parking topic "a/b" contains '/'`},
		{admin.ParkRequest{KeyQuery: admin.KeyQuery{Topic: "payments", Key: []byte("key-3"), Partition: 0}}, `topic "payments"`},
	} {
		if _, err := g.ParkKey(ctx, tc.r); !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("park %+v: got %v, want ErrBadKeyQuery naming %q", tc.r, err, tc.want)
		}
	}
	if n := countKeyOps(t, cli); n != 0 {
		t.Fatalf("%d operations stored after refused parks", n)
	}
	op, err := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, By: "ops@test", Reason: "bad data"})
	if err != nil {
		t.Fatal(err)
	}
	if op.Op != "park" || op.ParkTopic != "orders.keyshare-parked" {
		t.Errorf("park set as %+v; want the default parking topic", op)
	}
	if _, err := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q}); !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), "already has an operation (park)") {
		t.Errorf("second park: got %v", err)
	}
	if _, err := g.SkipKey(ctx, admin.SkipRequest{KeyQuery: q, Offset: 0}); !errors.Is(err, admin.ErrBadKeyQuery) {
		t.Errorf("skip of a parked key: got %v, want it refused", err)
	}
	owner := func() string {
		info, err := g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0, MaxScan: 1})
		if err != nil || info.Range == nil {
			return ""
		}
		return fmt.Sprintf("%s [%d,%d)", info.Range.Owner, info.Range.Lo, info.Range.Hi)
	}
	time.Sleep(time.Second)
	t.Logf("key-3 parked, owned by %s", owner())
	stop2 := startMember(t, e.Endpoints, k.Brokers, "m2", h, mode)
	testutil.WaitFor(t, "the range split with m2", 30*time.Second, func() bool {
		info, err := g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0, MaxScan: 1})
		return err == nil && info.Range != nil && info.Range.Hi-info.Range.Lo < 1<<32 && info.Range.State == "active"
	})
	t.Logf("m2 joined: key-3 owned by %s", owner())
	time.Sleep(time.Second)
	stop2()
	testutil.WaitFor(t, "m1 owning all again", 30*time.Second, func() bool {
		info, err := g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0, MaxScan: 1})
		return err == nil && info.Range != nil && info.Range.Owner == "m1" && info.Range.Hi-info.Range.Lo == 1<<32
	})
	t.Logf("m2 left: key-3 owned by %s", owner())
	time.Sleep(500 * time.Millisecond)
	gotParked := len(handled.of("key-3"))

	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: admin.KeyQuery{Topic: "orders", Key: []byte("key-0"), Partition: 0}}); !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), `key "key-0" of "orders"/0 is not parked`) {
		t.Errorf("unpark of a key not parked: got %v", err)
	}
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the unpark done", 30*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	time.Sleep(500 * time.Millisecond) // live records of key-3 after the unpark
	sent := s.stop(t)
	total := int64(0)
	for _, offs := range sent {
		total += int64(len(offs))
	}
	testutil.WaitFor(t, "the commit at the end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == total
	})

	got, park := handled.of("key-3"), parked(t, k.Brokers, op.ParkTopic, op.ParkFrom, "key-3")
	t.Logf("key-3: %d records, %d handled before the park, %d parked", len(sent["key-3"]), gotParked, len(park))
	if len(park) == 0 {
		t.Fatal("nothing parked")
	}
	all := sent["key-3"]
	if gotParked+len(park) > len(all) || !slices.Equal(park, all[gotParked:gotParked+len(park)]) {
		t.Errorf("key-3 parked %v after %d handled; want the next of its records %v, in order", park, gotParked, all)
	}
	if !slices.Equal(got, all) {
		t.Errorf("key-3 handled at %v; want its records %v each once in order: those before the park, the parked ones when unparked, then the later ones", got, all)
	}
	for key, offs := range sent {
		if key != "key-3" && !slices.Equal(handled.of(key), offs) {
			t.Errorf("%s handled at %v, want %v", key, handled.of(key), offs)
		}
	}
}

// TestParkingProducerRefused: the member's Kafka settings include one the
// idempotent parking producer refuses (max.in.flight.requests.per.connection
// above 5). While key k is parked its records wait: the producer is made
// again and again, none of k's records is handled or lost, and other keys
// go on. Unparked, k's records are handled each once, in order, and the
// committed offset reaches the end. The same with a BatchHandler.
func TestParkingProducerRefused(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testParkingProducerRefused(t, false) })
	t.Run("batch", func(t *testing.T) { testParkingProducerRefused(t, true) })
}

func testParkingProducerRefused(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.park": 1})
	var handled handledLog
	h := func(_ context.Context, m *kafka.Message) error {
		handled.add(m)
		return nil
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", h, batchMode(batch, h), func(c *consumer.Config) {
		c.Kafka["max.in.flight.requests.per.connection"] = 10
	})
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
	rec := func(key string) testutil.Record {
		return testutil.Record{Key: []byte(key), Value: []byte("v"), Partition: 0}
	}
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{rec("k")})
	testutil.WaitFor(t, "k's first record handled", 30*time.Second, func() bool { return len(handled.of("k")) == 1 })
	if _, err := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, ParkTopic: "orders.park", By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{rec("k"), rec("k"), rec("other")})
	testutil.WaitFor(t, "the other key handled", 30*time.Second, func() bool { return len(handled.of("other")) == 1 })
	time.Sleep(500 * time.Millisecond) // the parking producer made and refused again
	if got := handled.of("k"); !slices.Equal(got, []int64{0}) {
		t.Fatalf("k handled at %v while parked, want [0]", got)
	}
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the commit at the end", 20*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 4
	})
	time.Sleep(300 * time.Millisecond) // any record handled twice
	if got := handled.of("k"); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Errorf("k handled at %v, want [0 1 2]: each once, in order", got)
	}
}

// TestParkedKeyHoldsNoBatch: with a BatchHandler, key k is parked and its
// record is too large for the parking topic, so its owner writes it again
// and again; a record of key x comes in the same burst. x is handled while
// k's copy is refused: a parked key holds its own records only, not the
// batch they came in. The member then leaves with a 1 s drain budget, its
// range is released, and the batch handler is not called after the leave
// began with a context that has not ended.
func TestParkedKeyHoldsNoBatch(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.park": 1})
	setTopicConfig(t, k.Brokers, "orders.park", "max.message.bytes", "10000")
	var handled handledLog
	var leaving atomic.Bool
	var late atomic.Int32 // calls after the leave began, with a live context
	h := func(_ context.Context, m *kafka.Message) error {
		handled.add(m)
		return nil
	}
	stop := startMember(t, e.Endpoints, k.Brokers, "m1", h, batchMode(true, h), func(c *consumer.Config) {
		inner := c.BatchHandler
		c.BatchHandler = func(ctx context.Context, ms []*kafka.Message) []error {
			if leaving.Load() && ctx.Err() == nil {
				late.Add(1)
			}
			return inner(ctx, ms)
		}
	})
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the member at work", 30*time.Second, func() bool { return len(handled.of("other")) == 1 })
	if _, err := g.ParkKey(t.Context(), admin.ParkRequest{KeyQuery: admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}, ParkTopic: "orders.park", By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{
		{Key: []byte("k"), Value: bytes.Repeat([]byte("b"), 20_000), Partition: 0},
		{Key: []byte("x"), Value: []byte("v"), Partition: 0},
	})
	testutil.WaitFor(t, "x handled while k's copy is refused", 10*time.Second, func() bool { return len(handled.of("x")) == 1 })
	leaving.Store(true)
	stop()
	if n := late.Load(); n != 0 {
		t.Errorf("the batch handler was called %d times after the leave began, with a context that had not ended", n)
	}
	if got := handled.of("k"); len(got) != 0 {
		t.Errorf("k handled at %v while parked", got)
	}
}

// TestParkedCopiesKeepOrderThroughAFailure: key k is parked and five of
// its records come at once, the third too large for the parking topic,
// so its copy fails while the later ones are on their way. Once the
// topic takes it (its max.message.bytes raised), the parking partition
// holds the five in their original order, each once, and the commit
// passes them: no copy overtook the failed one, and none counted done
// before it was acknowledged.
func TestParkedCopiesKeepOrderThroughAFailure(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testParkedCopiesKeepOrder(t, false) })
	t.Run("batch", func(t *testing.T) { testParkedCopiesKeepOrder(t, true) })
}

func testParkedCopiesKeepOrder(t *testing.T, batch bool) {
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
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the member at work", 30*time.Second, func() bool { return len(handled.of("other")) == 1 })
	op, err := g.ParkKey(t.Context(), admin.ParkRequest{KeyQuery: admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}, ParkTopic: "orders.park", By: "ops@test"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	var recs []testutil.Record
	for i := range 5 {
		v := []byte("small")
		if i == 2 {
			v = bytes.Repeat([]byte("b"), 20_000)
		}
		recs = append(recs, testutil.Record{Key: []byte("k"), Value: v, Partition: 0})
	}
	testutil.Produce(t, k.Brokers, "orders", recs)
	time.Sleep(time.Second) // the large copy fails and is written again
	if c := testutil.Committed(t, k.Brokers, "g", "orders", 1)[0]; c > 3 {
		t.Fatalf("committed %d while the copy of offset 3 was refused", c)
	}
	setTopicConfig(t, k.Brokers, "orders.park", "max.message.bytes", "100000")
	testutil.WaitFor(t, "the commit past k's records", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 6
	})
	if got := parked(t, k.Brokers, op.ParkTopic, op.ParkFrom, "k"); !slices.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("parked in the order %v, want [1 2 3 4 5]", got)
	}
	if got := handled.of("k"); len(got) != 0 {
		t.Errorf("k handled at %v while parked", got)
	}
}
