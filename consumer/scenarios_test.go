package consumer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

func newCluster(t *testing.T, topics map[string]int32) (*cluster, *testutil.Kafka) {
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, topics)
	var names []string
	for n := range topics {
		names = append(names, n)
	}
	return &cluster{t: t, endpoints: e.Endpoints, brokers: k.Brokers, group: "g", topics: names}, k
}

// produceSlowly produces n records in batches while the test changes
// membership, returning all offsets.
func produceInBatches(t *testing.T, brokers, topic string, recs []testutil.Record, batches int, between func(i int)) []kafka.TopicPartition {
	var out []kafka.TopicPartition
	per := len(recs) / batches
	for i := range batches {
		end := (i + 1) * per
		if i == batches-1 {
			end = len(recs)
		}
		out = append(out, testutil.Produce(t, brokers, topic, recs[i*per:end])...)
		between(i)
	}
	return out
}

// TestScaleOutAndIn: members join one by one (1→4) and leave one by one
// (4→1) while records flow; graceful changes run nothing twice.
func TestScaleOutAndIn(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	h := newHistory(t)
	ids := []string{"m1", "m2", "m3", "m4"}
	members := map[string]*member{"m1": cl.start("m1", h.handler("m1", 2*time.Millisecond))}
	recs := testutil.KeyedRecords(3000, 300)
	produced := produceInBatches(t, k.Brokers, "orders", recs, 7, func(i int) {
		switch {
		case i < 3:
			id := ids[i+1]
			members[id] = cl.start(id, h.handler(id, 2*time.Millisecond))
		case i < 6:
			id := ids[6-i]
			members[id].stop(t)
			delete(members, id)
		}
		time.Sleep(700 * time.Millisecond)
	})
	waitFor(t, "all records handled", 90*time.Second, func() bool { return h.count() == len(produced) })
	dups := h.check(produced)
	t.Logf("scale 1→4→1: %d records, %d handled twice", len(produced), dups)
	if dups != 0 {
		t.Fatalf("graceful rebalances ran %d records twice", dups)
	}
}

// TestCrashFailover: a member's session is lost without a handoff (its
// lease is revoked); its ranges resume on the others from the last flushed
// state. No record is lost; duplicates stay within the design bound
// (flush interval × rate + in-flight bound).
func TestCrashFailover(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	h := newHistory(t)
	a := cl.start("a", h.handler("a", 2*time.Millisecond))
	cl.start("b", h.handler("b", 2*time.Millisecond))
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	recs := testutil.KeyedRecords(2000, 200)
	produced := produceInBatches(t, k.Brokers, "orders", recs, 4, func(i int) {
		if i == 1 {
			resp, err := cli.Get(t.Context(), "/keyshare/g/members/a")
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("a's registration: %v", err)
			}
			if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond)
	})
	waitFor(t, "all records handled", 90*time.Second, func() bool { return h.count() == len(produced) })
	dups := h.check(produced)
	cfg := cl.config("x", nil)
	bound := cfg.MaxInFlight + len(recs) // generous: flush interval × rate is at most the whole run here
	t.Logf("crash failover: %d records, %d handled twice (bound %d)", len(produced), dups, bound)
	if dups > bound {
		t.Fatalf("%d duplicates exceed the bound %d", dups, bound)
	}
	_ = a
}

// TestBlockedKeyHoldsOnlyItself: one key's handler blocks; the other keys
// keep completing and the committed offset stays below the blocked record.
func TestBlockedKeyHoldsOnlyItself(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	h := newHistory(t)
	release := make(chan struct{})
	inner := h.handler("m", time.Millisecond)
	blockedAt := atomic.Int64{}
	blockedAt.Store(-1)
	handler := func(ctx context.Context, m *kafka.Message) error {
		if string(m.Key) == "key-7" && blockedAt.CompareAndSwap(-1, int64(m.TopicPartition.Offset)) {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inner(ctx, m)
	}
	cl.start("m", handler)
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(2000, 100))
	start := time.Now()
	// Every record of other keys completes; key-7's first record blocks
	// and so do its later ones (same key, in order).
	waitFor(t, "other keys complete", 60*time.Second, func() bool { return h.count() == len(produced)-20 })
	took := time.Since(start)
	t.Logf("blocked key: %d records of other keys completed in %s (%.0f records/s)", len(produced)-20, took.Round(time.Millisecond), float64(len(produced)-20)/took.Seconds())
	time.Sleep(500 * time.Millisecond)
	if c, ok := testutil.Committed(t, k.Brokers, "g", "orders", 1)[0]; ok && c > blockedAt.Load() {
		t.Fatalf("committed %d past the blocked record at %d", c, blockedAt.Load())
	}
	close(release)
	waitFor(t, "all complete", 30*time.Second, func() bool { return h.count() == len(produced) })
	waitFor(t, "commit reaches end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	h.check(produced)
}

// TestPoisonRecordDeadLettered: a record that always fails is retried, then
// written to the dead-letter topic with its headers, and the watermark moves
// past it.
func TestPoisonRecordDeadLettered(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	cl.topics = []string{"orders"}
	cl.mutate = func(c *consumer.Config) {
		c.DeadLetterTopic = "orders.dlq"
		c.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond}
	}
	h := newHistory(t)
	inner := h.handler("m", 0)
	var attempts atomic.Int32
	cl.start("m", func(ctx context.Context, m *kafka.Message) error {
		if m.TopicPartition.Offset == 42 {
			attempts.Add(1)
			panic("poison")
		}
		return inner(ctx, m)
	})
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(100, 10))
	waitFor(t, "commit reaches end", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	if got := attempts.Load(); got != 3 {
		t.Fatalf("poison record tried %d times, want 3", got)
	}
	// Read the dead-letter topic with a separate consumer.
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "reader", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "orders.dlq"
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	m, err := c.ReadMessage(20 * time.Second)
	if err != nil {
		t.Fatalf("read dead-letter topic: %v", err)
	}
	hdr := make(map[string]string)
	for _, x := range m.Headers {
		hdr[x.Key] = string(x.Value)
	}
	if hdr[consumer.HeaderOffset] != "42" || hdr[consumer.HeaderTopic] != "orders" || hdr[consumer.HeaderPartition] != "0" ||
		hdr[consumer.HeaderAttempts] != "3" || !strings.Contains(hdr[consumer.HeaderError], "poison") {
		t.Fatalf("dead-letter headers: %v", hdr)
	}
}

// TestMigrationFromPlainGroup: a plain consumer group handles the first half
// and commits; keyshare members take over from its committed offset.
func TestMigrationFromPlainGroup(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 2})
	recs := testutil.KeyedRecords(1000, 50)
	for i := range recs {
		recs[i].Partition = int32(i % 2)
	}
	produced := testutil.Produce(t, k.Brokers, "orders", recs)
	// The plain group consumes up to offset 200 of each partition.
	plain, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "g", "enable.auto.commit": false, "auto.offset.reset": "earliest", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SubscribeTopics([]string{"orders"}, nil); err != nil {
		t.Fatal(err)
	}
	const cut = 200
	plainSeen := make(map[string]bool)
	for len(plainSeen) < 2*cut {
		m, err := plain.ReadMessage(30 * time.Second)
		if err != nil {
			t.Fatalf("plain group read: %v", err)
		}
		if m.TopicPartition.Offset < cut {
			plainSeen[recID(m)] = true
		}
	}
	topic := "orders"
	if _, err := plain.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: cut}, {Topic: &topic, Partition: 1, Offset: cut}}); err != nil {
		t.Fatal(err)
	}
	plain.Close()

	h := newHistory(t)
	cl.start("m1", h.handler("m1", 0))
	cl.start("m2", h.handler("m2", 0))
	waitFor(t, "the rest handled", 60*time.Second, func() bool { return h.count() == len(produced)-2*cut })
	time.Sleep(300 * time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	for id := range h.handled {
		if plainSeen[id] {
			t.Fatalf("record %s handled by the plain group ran again", id)
		}
	}
	if len(h.handled) != len(produced)-2*cut || h.dups != 0 {
		t.Fatalf("keyshare handled %d records (%d twice), want %d once", len(h.handled), h.dups, len(produced)-2*cut)
	}
}

// TestSeveralTopicsAndPartitions: P > M and P < M.
func TestSeveralTopicsAndPartitions(t *testing.T) {
	testutil.ParallelOnKfake(t)
	for _, tc := range []struct {
		name    string
		members int
	}{{"P>M", 2}, {"P<M", 7}} {
		t.Run(tc.name, func(t *testing.T) {
			cl, k := newCluster(t, map[string]int32{"a": 3, "b": 2})
			h := newHistory(t)
			for i := range tc.members {
				id := string(rune('p' + i))
				cl.start(id, h.handler(id, 0))
			}
			var produced []kafka.TopicPartition
			for _, topic := range []string{"a", "b"} {
				recs := testutil.KeyedRecords(600, 60)
				for i := range recs {
					recs[i].Partition = -1 // librdkafka's partitioner spreads keys
				}
				produced = append(produced, testutil.Produce(t, k.Brokers, topic, recs)...)
			}
			waitFor(t, "all handled", 60*time.Second, func() bool { return h.count() == len(produced) })
			if dups := h.check(produced); dups != 0 {
				t.Fatalf("%d duplicates", dups)
			}
		})
	}
}

func TestBadConfigRefusedBeforeJoining(t *testing.T) {
	cl, _ := newCluster(t, map[string]int32{"orders": 1})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	ok := func(context.Context, *kafka.Message) error { return nil }
	cases := map[string]func(*consumer.Config){
		"auto commit on":    func(c *consumer.Config) { c.Kafka["enable.auto.commit"] = true },
		"concurrency 0":     func(c *consumer.Config) { c.Concurrency = 0 },
		"nil handler":       func(c *consumer.Config) { c.Handler = nil },
		"empty topics":      func(c *consumer.Config) { c.Topics = nil },
		"group mismatch":    func(c *consumer.Config) { c.Kafka["group.id"] = "other" },
		"no brokers":        func(c *consumer.Config) { delete(c.Kafka, "bootstrap.servers") },
		"bad reset":         func(c *consumer.Config) { c.AutoOffsetReset = "middle" },
		"in-flight small":   func(c *consumer.Config) { c.MaxInFlight = 1 },
		"etcd timeout 0":    func(c *consumer.Config) { c.EtcdTimeout = 0 },
		"bad retention":     func(c *consumer.Config) { c.RetentionLoss = "skip" },
		"partition eof off": func(c *consumer.Config) { c.Kafka["enable.partition.eof"] = false },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := cl.config("m", ok)
			mutate(&cfg)
			_, err := consumer.New(cli, cfg)
			if !errors.Is(err, consumer.ErrConfig) {
				t.Fatalf("New: %v, want ErrConfig", err)
			}
			t.Log(err)
		})
	}
	t.Run("missing topic", func(t *testing.T) {
		cfg := cl.config("m", ok)
		cfg.Topics = []string{"nope"}
		c, err := consumer.New(cli, cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = c.Run(t.Context())
		if err == nil || !strings.Contains(err.Error(), `"nope"`) {
			t.Fatalf("Run: %v, want an error naming the missing topic", err)
		}
		resp, _ := cli.Get(t.Context(), "/keyshare/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if resp.Count != 0 {
			t.Fatalf("%d keys written before the error", resp.Count)
		}
	})
}

// TestBackpressureBoundsInFlight: a blocked key piles up records behind it
// until the in-flight bound; then the member stops taking records, pauses its
// partition, and never holds more than the bound. Releasing the key lets
// everything finish. (MaxQueuedPerKey at the in-flight bound lets the key
// fill it: TestBlockedKeyLeavesMemory shows the default.)
func TestBackpressureBoundsInFlight(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) { c.MaxInFlight, c.MaxQueuedPerKey = 50, 50 }
	h := newHistory(t)
	release := make(chan struct{})
	m := cl.start("m", blockKey7(release, nil, h.handler("m", 0)))
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(8000, 100))
	maxSeen := 0
	waitFor(t, "the partition paused at the bound", 60*time.Second, func() bool {
		st := m.c.Status()
		maxSeen = max(maxSeen, st.InFlight)
		return st.Paused
	})
	for range 20 {
		st := m.c.Status()
		maxSeen = max(maxSeen, st.InFlight)
		time.Sleep(10 * time.Millisecond)
	}
	if maxSeen > 50 {
		t.Fatalf("in flight reached %d, bound 50", maxSeen)
	}
	if n := h.count(); n >= len(produced)-80 {
		t.Fatalf("%d records handled while key-7 blocked: fetching did not stop at the bound", n)
	}
	close(release)
	waitFor(t, "all records", 60*time.Second, func() bool { return h.count() == len(produced) })
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestRefusedWhilePlainGroupIsLive: a group id that a plain Kafka consumer
// group still uses (a member subscribed and assigned) is refused at start
// with ErrPlainGroupLive, naming the member, and nothing is written to etcd;
// once the plain member leaves, keyshare starts and takes over from its
// committed offset.
func TestRefusedWhilePlainGroupIsLive(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(100, 10))
	plain, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": cl.group, "client.id": "legacy-app", "enable.auto.commit": false, "auto.offset.reset": "earliest", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SubscribeTopics([]string{"orders"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.ReadMessage(30 * time.Second); err != nil { // joined and assigned
		t.Fatal(err)
	}

	cli := testutil.NewEtcdClient(t, cl.endpoints)
	h := newHistory(t)
	c, err := consumer.New(cli, cl.config("m1", h.handler("m1", 0)))
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: without the check Run would consume (and fight the plain
	// group over the committed offset) until the context ends.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if !errors.Is(err, consumer.ErrPlainGroupLive) || !strings.Contains(err.Error(), "legacy-app") {
		t.Fatalf("Run: %v, want ErrPlainGroupLive naming client legacy-app", err)
	}
	t.Log(err)
	resp, err := cli.Get(t.Context(), "/keyshare/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 0 {
		t.Fatalf("%d keys written to etcd before the refusal", resp.Count)
	}

	plain.Close() // leaves the group
	cl.start("m2", h.handler("m2", 0))
	waitFor(t, "every record handled after the plain member left", 60*time.Second, func() bool { return h.count() == len(produced) })
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}

// TestPlainGroupJoiningLaterIsNamed: a plain consumer group that joins under
// keyshare's group id after keyshare started makes Kafka refuse the leader's
// commits; the leader says why in one clear error, commits nothing else, and
// goes on committing once the plain member has gone.
func TestPlainGroupJoiningLaterIsNamed(t *testing.T) {
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	var logs testutil.Buffer
	cl.mutate = func(c *consumer.Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	}
	h := newHistory(t)
	cl.start("m1", h.handler("m1", 0))
	first := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(50, 5))
	waitFor(t, "the first records committed", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, "orders", 1)[0] == 50
	})

	plain, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": cl.group, "enable.auto.commit": false, "auto.offset.reset": "latest", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SubscribeTopics([]string{"orders"}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the plain member assigned", 30*time.Second, func() bool {
		plain.Poll(100)
		a, _ := plain.Assignment()
		return len(a) == 1
	})
	late := testutil.KeyedRecords(50, 5)
	for i := range late { // other keys: their sequence numbers start again
		late[i].Key = append([]byte("late-"), late[i].Key...)
	}
	more := testutil.Produce(t, k.Brokers, "orders", late)
	waitFor(t, "the leader naming the plain group", 30*time.Second, func() bool {
		return strings.Contains(logs.String(), "a plain Kafka consumer group with live members uses this group id")
	})
	if c := testutil.Committed(t, k.Brokers, cl.group, "orders", 1)[0]; c != 50 {
		t.Fatalf("committed %d while the plain member is live, want keyshare's commits refused (50)", c)
	}
	plain.Close()
	waitFor(t, "committed == end after the plain member left", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, "orders", 1)[0] == 100
	})
	if dups := h.check(append(first, more...)); dups != 0 {
		t.Fatalf("%d duplicates", dups)
	}
}
