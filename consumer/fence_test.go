package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// fenceSeen is a fence a handler got for a record, in the order handlers
// asked (seq).
type fenceSeen struct {
	seq    int
	member string
	offset int64
	hash   uint32
	f      consumer.Fence
}

// fenceLog collects the fences handlers see.
type fenceLog struct {
	mu     sync.Mutex
	seen   []fenceSeen
	failed []string
}

func (l *fenceLog) add(ctx context.Context, member string, m *kafka.Message) {
	f, ok := consumer.FenceOf(ctx, m)
	l.mu.Lock()
	defer l.mu.Unlock()
	o := int64(m.TopicPartition.Offset)
	if !ok {
		l.failed = append(l.failed, fmt.Sprintf("member %s, offset %d: FenceOf found no fence", member, o))
		return
	}
	l.seen = append(l.seen, fenceSeen{seq: len(l.seen), member: member, offset: o, hash: ledger.Hash(m.Key, o), f: f})
}

func (l *fenceLog) handler(member string) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		l.add(ctx, member, m)
		return nil
	}
}

func (l *fenceLog) snapshot() []fenceSeen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]fenceSeen(nil), l.seen...)
}

// offsets returns the distinct offsets the handlers saw.
func (l *fenceLog) offsets() int {
	seen := map[int64]bool{}
	for _, s := range l.snapshot() {
		seen[s.offset] = true
	}
	return len(seen)
}

// check fails on a missing fence, a fence whose range does not hold its
// record's hash or names another partition, and on a fence seen after
// another member's fence of an overlapping range without a larger token:
// a later owner of any of a range's hashes must have a larger token.
// It returns the members seen.
func (l *fenceLog) check(t *testing.T, topic string) map[string]int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.failed {
		t.Error(e)
	}
	members := map[string]int{}
	for _, s := range l.seen {
		members[s.member]++
		if s.f.Topic != topic || s.f.Partition != 0 || uint64(s.hash) < s.f.Lo || uint64(s.hash) >= s.f.Hi || s.f.Token <= 0 {
			t.Errorf("offset %d (hash %d) handled by %s under fence %+v", s.offset, s.hash, s.member, s.f)
		}
	}
	// Each fence against every other member's earlier ones.
	for i, later := range l.seen {
		for _, earlier := range l.seen[:i] {
			if earlier.member == later.member || earlier.f.Hi <= later.f.Lo || later.f.Hi <= earlier.f.Lo {
				continue
			}
			if later.f.Token <= earlier.f.Token {
				t.Fatalf("%s handled offset %d under token %d on [%d, %d) after %s used token %d on [%d, %d) for offset %d",
					later.member, later.offset, later.f.Token, later.f.Lo, later.f.Hi, earlier.member, earlier.f.Token, earlier.f.Lo, earlier.f.Hi, earlier.offset)
			}
		}
	}
	return members
}

// matchEtcd checks that each of member's fences is one of its range
// records in snap, at the record's ModRevision, and returns how many it
// checked.
func matchEtcd(t *testing.T, snap *schema.Snapshot, fences []fenceSeen, member string) int {
	t.Helper()
	matched := 0
	for _, s := range fences {
		if s.member != member {
			continue
		}
		found := false
		for _, r := range snap.Ranges {
			if r.Record.Owner == member && r.Record.Topic == s.f.Topic && r.Record.Partition == s.f.Partition && r.Record.Lo == s.f.Lo && r.Record.Hi == s.f.Hi {
				if r.Rev != s.f.Token {
					t.Errorf("offset %d: token %d, but the range record [%d, %d) of %s is at revision %d in etcd", s.offset, s.f.Token, s.f.Lo, s.f.Hi, member, r.Rev)
				}
				found = true
			}
		}
		if !found {
			t.Errorf("offset %d: no range record [%d, %d) of %s in etcd", s.offset, s.f.Lo, s.f.Hi, member)
		}
		matched++
	}
	return matched
}

// TestFenceOfTokens: a handler's fence is its range record's revision in
// etcd; a member joining and then the first member leaving move the
// range's hashes, and each later owner's token is larger than every
// earlier owner's token on an overlapping range.
func TestFenceOfTokens(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	var l fenceLog
	readSnap := func() *schema.Snapshot {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}

	a := cl.start("a", l.handler("a"))
	recs := testutil.KeyedRecords(300, 50)
	testutil.Produce(t, k.Brokers, "orders", recs[:100])
	waitFor(t, "a handles the first records", 30*time.Second, func() bool { return l.offsets() == 100 })
	if n := matchEtcd(t, readSnap(), l.snapshot(), "a"); n != 100 {
		t.Fatalf("a's fences: %d, want 100", n)
	}
	// Other contexts and messages have no fence.
	if _, ok := consumer.FenceOf(context.Background(), &kafka.Message{}); ok {
		t.Error("FenceOf found a fence in a background context")
	}

	cl.start("b", l.handler("b"))
	waitFor(t, "b owns a range", 30*time.Second, func() bool { return len(readSnap().Owned("b")) > 0 })
	testutil.Produce(t, k.Brokers, "orders", recs[100:200])
	waitFor(t, "both handle the next records", 30*time.Second, func() bool { return l.offsets() == 200 })

	a.stop(t) // a leaves: b takes every hash
	testutil.Produce(t, k.Brokers, "orders", recs[200:])
	waitFor(t, "b handles the rest", 30*time.Second, func() bool { return l.offsets() == 300 })

	members := l.check(t, "orders")
	if members["a"] == 0 || members["b"] == 0 {
		t.Fatalf("records handled per member: %v; want both", members)
	}
	fences := l.snapshot()
	var bLast []fenceSeen
	for _, s := range fences {
		if s.member == "b" && s.offset >= 200 {
			bLast = append(bLast, s)
		}
	}
	if n := matchEtcd(t, readSnap(), bLast, "b"); n == 0 {
		t.Fatal("b handled none of the records produced after a left")
	}
}

// TestFenceOfBatch: a BatchHandler gets each message's fence from the
// batch's context, equal to the revision of the range record in etcd; a
// message outside the batch has none.
func TestFenceOfBatch(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	var l fenceLog
	var mu sync.Mutex
	var largest, outsiders int
	topic := "orders"
	outsider := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: 1 << 40}}
	cl.startBatch("a", func(ctx context.Context, batch []*kafka.Message) []error {
		for _, m := range batch {
			l.add(ctx, "a", m)
		}
		mu.Lock()
		defer mu.Unlock()
		largest = max(largest, len(batch))
		if _, ok := consumer.FenceOf(ctx, outsider); ok {
			outsiders++
		}
		return nil
	})
	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(200, 20))
	waitFor(t, "a handles every record", 30*time.Second, func() bool { return l.offsets() == 200 })
	l.check(t, "orders")
	snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if n := matchEtcd(t, snap, l.snapshot(), "a"); n < 200 {
		t.Fatalf("fences matched in etcd: %d, want 200", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if largest < 2 {
		t.Fatal("no batch held two records")
	}
	if outsiders > 0 {
		t.Errorf("%d batches found a fence for a message not in the batch", outsiders)
	}
}

// TestFencedNeverDeadLettered: a record whose handler fails with
// ErrFenced is retried past Retry.MaxAttempts and never dead-lettered
// (its range has a newer owner, or the member's view is catching up);
// once its fence passes it is done, and the commit passes it. With a
// Handler and a BatchHandler.
func TestFencedNeverDeadLettered(t *testing.T) {
	testutil.ParallelOnKfake(t)
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			cl, k := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
			cl.topics = []string{"orders"}
			cl.mutate = func(c *consumer.Config) {
				c.DeadLetterTopic = "orders.dlq"
				c.Retry = consumer.RetryPolicy{MaxAttempts: 2, Backoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
			}
			const refusals = 5
			var mu sync.Mutex
			attempts := 0
			fenced := func(m *kafka.Message) error {
				if m.TopicPartition.Offset != 42 {
					return nil
				}
				mu.Lock()
				defer mu.Unlock()
				attempts++
				if attempts <= refusals {
					return fmt.Errorf("sink refused the write: %w", consumer.ErrFenced)
				}
				return nil
			}
			if batch {
				cl.startBatch("m", func(_ context.Context, msgs []*kafka.Message) []error {
					res := make([]error, len(msgs))
					for i, m := range msgs {
						res[i] = fenced(m)
					}
					return res
				})
			} else {
				cl.start("m", func(_ context.Context, m *kafka.Message) error { return fenced(m) })
			}
			produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(100, 10))
			waitFor(t, "commit reaches end", 60*time.Second, func() bool {
				return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
			})
			mu.Lock()
			got := attempts
			mu.Unlock()
			if got != refusals+1 {
				t.Fatalf("offset 42 tried %d times, want %d (refused %d times, past MaxAttempts 2, then done)", got, refusals+1, refusals)
			}
			c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "reader", "log_level": 3})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, high, err := c.QueryWatermarkOffsets("orders.dlq", 0, 10000)
			if err != nil {
				t.Fatal(err)
			}
			if high != 0 {
				t.Fatalf("%d dead letters; a fenced record must not be dead-lettered", high)
			}
		})
	}
}
