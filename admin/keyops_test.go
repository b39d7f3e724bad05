package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// handledLog records the offsets each key's records were handled at, in
// the order the handler saw them.
type handledLog struct {
	mu  sync.Mutex
	got map[string][]int64
}

func (l *handledLog) add(m *kafka.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.got == nil {
		l.got = make(map[string][]int64)
	}
	l.got[string(m.Key)] = append(l.got[string(m.Key)], int64(m.TopicPartition.Offset))
}

func (l *handledLog) of(key string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got[key])
}

// keyOffsets are the offsets each key's records were produced at.
func keyOffsets(recs []testutil.Record, produced []kafka.TopicPartition) map[string][]int64 {
	out := map[string][]int64{}
	for i, tp := range produced {
		out[string(recs[i].Key)] = append(out[string(recs[i].Key)], int64(tp.Offset))
	}
	for k := range out {
		slices.Sort(out[k])
	}
	return out
}

// batchMode returns a configuration change that, when batch is set,
// hands the member's records to h through a BatchHandler instead. Once a
// record of a key fails, the key's later records of the batch are not
// handled (a member runs them again after the failed one).
func batchMode(batch bool, h consumer.Handler) func(*consumer.Config) {
	return func(c *consumer.Config) {
		if !batch {
			return
		}
		c.Handler, c.MaxBatchSize, c.MaxBatchWait = nil, 16, 5*time.Millisecond
		c.BatchHandler = func(ctx context.Context, ms []*kafka.Message) []error {
			errs := make([]error, len(ms))
			failed := map[string]error{}
			for i, m := range ms {
				if err, ok := failed[string(m.Key)]; ok {
					errs[i] = err
					continue
				}
				if errs[i] = h(ctx, m); errs[i] != nil {
					failed[string(m.Key)] = errs[i]
				}
			}
			return errs
		}
	}
}

// countKeyOps is how many operations the group's keyops/ holds.
func countKeyOps(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/keyshare/g/keyops/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestSkipStuckKey: key-3's handler fails forever on its first record.
// Skips that are not for its head (another offset, a key with nothing
// pending, an unknown group or topic) are refused naming the value and
// store nothing. A skip of the head dead-letters that record with a cause
// naming the operator; key-3's later records are then handled, in order,
// the skip is deleted and the commit reaches the end. A skip of a record
// the key has already passed, written behind the admin's back, is deleted
// by the owner and never applied. The same with a BatchHandler.
func TestSkipStuckKey(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testSkipStuckKey(t, false) })
	t.Run("batch", func(t *testing.T) { testSkipStuckKey(t, true) })
}

func testSkipStuckKey(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	recs := testutil.KeyedRecords(60, 6)
	offsets := keyOffsets(recs, testutil.Produce(t, k.Brokers, "orders", recs))
	poison := offsets["key-3"][0]
	var handled handledLog
	h := func(_ context.Context, m *kafka.Message) error {
		if string(m.Key) == "key-3" && int64(m.TopicPartition.Offset) == poison {
			return errors.New("no such customer")
		}
		handled.add(m)
		return nil
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", h, func(c *consumer.Config) { c.DeadLetterTopic = "orders.dlq"; c.Retry.MaxAttempts = 1 << 30 }, batchMode(batch, h))

	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	q := func(key string) admin.KeyQuery {
		return admin.KeyQuery{Topic: "orders", Key: []byte(key), Partition: 0}
	}
	var info admin.KeyInfo
	testutil.WaitFor(t, "key-3 reported stuck", 30*time.Second, func() bool {
		info, err = g.DescribeKey(ctx, q("key-3"))
		return err == nil && info.Stuck != nil
	})
	testutil.WaitFor(t, "key-0 handled", 20*time.Second, func() bool {
		info, err := g.DescribeKey(ctx, q("key-0"))
		return err == nil && len(info.Pending) == 0
	})

	other, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "nope")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.SkipKey(ctx, admin.SkipRequest{KeyQuery: q("key-3"), Offset: poison}); !errors.Is(err, admin.ErrUnknownGroup) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown group: got %v, want ErrUnknownGroup naming it", err)
	}
	for _, tc := range []struct {
		r    admin.SkipRequest
		want string
	}{
		{admin.SkipRequest{KeyQuery: q("key-3"), Offset: poison + 6}, fmt.Sprintf(`offset %d is not the head of key "key-3" of "orders"/0: its head is %d, the record its stuck report names`, poison+6, poison)},
		{admin.SkipRequest{KeyQuery: q("key-3"), Offset: -1}, "offset -1"},
		{admin.SkipRequest{KeyQuery: q("key-0"), Offset: offsets["key-0"][0]}, `key "key-0" of "orders"/0 has no pending record`},
		{admin.SkipRequest{KeyQuery: admin.KeyQuery{Topic: "payments", Key: []byte("key-3"), Partition: 0}, Offset: poison}, `topic "payments"`},
		{admin.SkipRequest{KeyQuery: admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 4}, Offset: poison}, "not 4"},
		{admin.SkipRequest{KeyQuery: q(strings.Repeat("k", schema.MaxKeyOpKeyBytes+1)), Offset: poison}, "a key of 1025 bytes"},
	} {
		if _, err := g.SkipKey(ctx, tc.r); !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("skip %.40q at %d: got %v, want ErrBadKeyQuery naming %q", tc.r.Key, tc.r.Offset, err, tc.want)
		}
	}
	if n := countKeyOps(t, cli); n != 0 {
		t.Fatalf("%d operations stored after refused skips, want none", n)
	}
	if _, err := g.CancelKeyOp(ctx, q("key-3")); !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), `key "key-3" of "orders"/0 has no operation`) {
		t.Errorf("cancel without an operation: got %v", err)
	}

	// A skip of key-0's first record, long handled, as an older command
	// or a race with the key's progress could leave it.
	stale, err := coord.PutKeyOp(ctx, cli, schema.Group{Prefix: "/keyshare", Name: "g"},
		schema.KeyOpRecord{Op: schema.KeyOpSkip, Topic: "orders", Partition: 0, Key: []byte("key-0"), Offset: offsets["key-0"][0], By: "test"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	op, err := g.SkipKey(ctx, admin.SkipRequest{KeyQuery: q("key-3"), Offset: poison, By: "ops@test", Reason: "customer deleted"})
	if err != nil {
		t.Fatal(err)
	}
	if op.Op != "skip" || op.Offset != poison || op.By != "ops@test" {
		t.Errorf("skip set as %+v", op)
	}
	want := offsets["key-3"][1:]
	testutil.WaitFor(t, "key-3's later records handled", 20*time.Second, func() bool { return len(handled.of("key-3")) >= len(want) })
	if got := handled.of("key-3"); !slices.Equal(got, want) {
		t.Errorf("key-3 handled at %v, want %v: each later record once, in order", got, want)
	}
	testutil.WaitFor(t, "both skips deleted", 20*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	testutil.WaitFor(t, "the commit at the end", 20*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(recs))
	})
	if _, err := cli.Get(ctx, stale.Name); err != nil {
		t.Fatal(err)
	}
	if got := handled.of("key-0"); !slices.Equal(got, offsets["key-0"]) {
		t.Errorf("key-0 handled at %v, want %v", got, offsets["key-0"])
	}
	dl := readDeadLetters(t, k.Brokers, "orders.dlq", 1)
	if h := header(dl[0], consumer.HeaderOffset); h != fmt.Sprint(poison) || !strings.Contains(header(dl[0], consumer.HeaderError), "skipped by an operator (ops@test): customer deleted") {
		t.Errorf("dead letter at offset %s with cause %q; want offset %d skipped by ops@test", h, header(dl[0], consumer.HeaderError), poison)
	}
	if more := readDeadLetters(t, k.Brokers, "orders.dlq", 2); len(more) > 1 {
		t.Errorf("%d dead letters, want 1: the skip the key had passed was applied", len(more))
	}
}

// readDeadLetters reads up to n records of partition 0 of topic, waiting
// a few seconds for each.
func readDeadLetters(t *testing.T, brokers, topic string, n int) []*kafka.Message {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "reader", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	var out []*kafka.Message
	for len(out) < n {
		m, err := c.ReadMessage(3 * time.Second)
		if err != nil {
			break
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		t.Fatalf("no record in %s", topic)
	}
	return out
}

func header(m *kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// TestSkipWithoutDeadLetterTopic: on a member with no dead-letter topic,
// a skip without Drop is refused by the owner, which says so in the
// stored operation (DescribeKey shows it) and keeps retrying the record;
// the skip set again with Drop drops it, and the key's later records run
// in order.
func TestSkipWithoutDeadLetterTopic(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	recs := testutil.KeyedRecords(30, 3)
	offsets := keyOffsets(recs, testutil.Produce(t, k.Brokers, "orders", recs))
	poison := offsets["key-1"][0]
	var handled handledLog
	startMember(t, e.Endpoints, k.Brokers, "m1", func(_ context.Context, m *kafka.Message) error {
		if string(m.Key) == "key-1" && int64(m.TopicPartition.Offset) == poison {
			return errors.New("no such customer")
		}
		handled.add(m)
		return nil
	})
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	q := admin.KeyQuery{Topic: "orders", Key: []byte("key-1"), Partition: 0}
	testutil.WaitFor(t, "key-1 reported stuck", 30*time.Second, func() bool {
		info, err := g.DescribeKey(ctx, q)
		return err == nil && info.Stuck != nil
	})
	if _, err := g.SkipKey(ctx, admin.SkipRequest{KeyQuery: q, Offset: poison, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	var info admin.KeyInfo
	testutil.WaitFor(t, "the skip refused by the owner", 20*time.Second, func() bool {
		info, err = g.DescribeKey(ctx, q)
		return err == nil && info.Op != nil && info.Op.Refused != ""
	})
	if !strings.Contains(info.Op.Refused, "m1: no dead-letter topic") || info.Stuck == nil || info.Stuck.Offset != poison {
		t.Errorf("refused %q, stuck %+v: want m1 naming the missing dead-letter topic, the record still stuck", info.Op.Refused, info.Stuck)
	}
	if got := handled.of("key-1"); len(got) != 0 {
		t.Fatalf("key-1 handled at %v while its head was refused a skip", got)
	}
	if _, err := g.SkipKey(ctx, admin.SkipRequest{KeyQuery: q, Offset: poison, Drop: true, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	want := offsets["key-1"][1:]
	testutil.WaitFor(t, "key-1's later records handled", 20*time.Second, func() bool { return len(handled.of("key-1")) >= len(want) })
	if got := handled.of("key-1"); !slices.Equal(got, want) {
		t.Errorf("key-1 handled at %v, want %v", got, want)
	}
	testutil.WaitFor(t, "the skip deleted", 20*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
}
