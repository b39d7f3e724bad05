package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// The tests here run on kfake and, with unique topic names and only Kafka
// protocol calls, on a real broker (compaction excepted: see
// TestCompactedPendingRecord).

// txnProducer writes transactions with a confluent-kafka-go transactional
// producer.
type txnProducer struct {
	t     *testing.T
	p     *kafka.Producer
	topic string
}

func newTxnProducer(t *testing.T, brokers, topic string) *txnProducer {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": brokers,
		"transactional.id":  "keyshare-test-" + topic,
		"linger.ms":         5,
		"log_level":         3,
	})
	if err != nil {
		t.Fatalf("transactional producer: %v", err)
	}
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := p.InitTransactions(ctx); err != nil {
		t.Fatalf("init transactions: %v", err)
	}
	return &txnProducer{t: t, p: p, topic: topic}
}

// write begins a transaction, writes recs to partition 0 and waits for
// their delivery; it returns their offsets. The transaction stays open.
func (tp *txnProducer) write(recs []testutil.Record) []int64 {
	tp.t.Helper()
	if err := tp.p.BeginTransaction(); err != nil {
		tp.t.Fatalf("begin transaction: %v", err)
	}
	done := make(chan kafka.Event, len(recs))
	for _, r := range recs {
		m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &tp.topic, Partition: 0}, Key: r.Key, Value: r.Value}
		if err := tp.p.Produce(m, done); err != nil {
			tp.t.Fatalf("produce: %v", err)
		}
	}
	offs := make([]int64, 0, len(recs))
	for range recs {
		select {
		case ev := <-done:
			m := ev.(*kafka.Message)
			if m.TopicPartition.Error != nil {
				tp.t.Fatalf("delivery: %v", m.TopicPartition.Error)
			}
			offs = append(offs, int64(m.TopicPartition.Offset))
		case <-time.After(30 * time.Second):
			tp.t.Fatal("delivery reports not in after 30s")
		}
	}
	return offs
}

// end commits (or aborts) the open transaction.
func (tp *txnProducer) end(commit bool) {
	tp.t.Helper()
	ctx, cancel := context.WithTimeout(tp.t.Context(), 30*time.Second)
	defer cancel()
	var err error
	if commit {
		err = tp.p.CommitTransaction(ctx)
	} else {
		err = tp.p.AbortTransaction(ctx)
	}
	if err != nil {
		tp.t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// logEnd is the partition's high watermark: its end, transaction markers
// and open transactions included.
func logEnd(t *testing.T, brokers, topic string, partition int32) int64 {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "keyshare-test-end", "isolation.level": "read_uncommitted", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, high, err := c.QueryWatermarkOffsets(topic, partition, 10000)
	if err != nil {
		t.Fatalf("log end of %s/%d: %v", topic, partition, err)
	}
	return high
}

// writeTxns writes n transactions of per records each (keyed over 10 keys),
// aborting every second one, and returns the offsets of the committed and
// of the aborted records.
func writeTxns(t *testing.T, tp *txnProducer, n, per int) (committed, aborted []int64) {
	t.Helper()
	recs := testutil.KeyedRecords(n*per, 10)
	for i := range n {
		offs := tp.write(recs[i*per : (i+1)*per])
		commit := i%2 == 0
		tp.end(commit)
		if commit {
			committed = append(committed, offs...)
		} else {
			aborted = append(aborted, offs...)
		}
	}
	return committed, aborted
}

func (h *history) handledOffset(topic string, o int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.handled[fmt.Sprintf("%s/0/%d", topic, o)] > 0
}

// checkOffsets reports each record of partition 0 in want that was never
// handled and each in unwanted that was; what says which records they are.
func (h *history) checkOffsets(t *testing.T, topic string, want, unwanted []int64, what string) {
	t.Helper()
	for _, o := range want {
		if !h.handledOffset(topic, o) {
			t.Errorf("%s: record %d never handled", what, o)
		}
	}
	for _, o := range unwanted {
		if h.handledOffset(topic, o) {
			t.Errorf("%s: record %d handled", what, o)
		}
	}
}

// TestTransactionsAbortedEveryOther: 20 (or 21) transactions of 50 keyed
// records, every second one aborted, read by two members under
// read_committed (librdkafka's default). Every committed record is handled,
// no aborted one, and the committed offset reaches the log end — past the
// transaction markers and, when the log ends in one, past an aborted
// transaction.
func TestTransactionsAbortedEveryOther(t *testing.T) {
	testutil.ParallelOnKfake(t)
	for _, c := range []struct {
		name string
		txns int
	}{{"ends aborted", 20}, {"ends committed", 21}} {
		t.Run(c.name, func(t *testing.T) {
			topic := fmt.Sprintf("txn-every-other-%d", c.txns)
			cl, k := newCluster(t, map[string]int32{topic: 1})
			committed, aborted := writeTxns(t, newTxnProducer(t, k.Brokers, topic), c.txns, 50)
			end := logEnd(t, k.Brokers, topic, 0)
			if want := int64(c.txns * 51); end != want {
				t.Fatalf("log end %d, want %d (50 records and a marker per transaction)", end, want)
			}
			h := newHistory(t)
			cl.start("a", h.handler("a", 0))
			cl.start("b", h.handler("b", 0))
			w := watchCommits(t, k.Brokers, cl.group, topic, 1)
			waitFor(t, "the committed offset reaches the log end", 30*time.Second, func() bool {
				return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == end
			})
			w.close()
			w.checkMonotonic(t)
			h.checkOffsets(t, topic, committed, aborted, "committed handled, aborted not")
			if n := h.count(); n != len(committed) {
				t.Errorf("%d records handled, want the %d committed", n, len(committed))
			}
			for _, e := range h.orderErrs {
				t.Error(e)
			}
		})
	}
}

// TestTransactionsWhileMembersChange: transactions (every second aborted)
// are written while members join (1→3) and leave (3→1), so ranges move,
// split and seek back while the fetchers cross markers and aborted
// records. Every committed record is handled exactly once (graceful
// changes), no aborted one, and the committed offset reaches the log end:
// nothing was skipped that had a record.
func TestTransactionsWhileMembersChange(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const topic = "txn-members-change"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	tp := newTxnProducer(t, k.Brokers, topic)
	h := newHistory(t)
	work := 5 * time.Millisecond // ranges take a while to drain: records arrive while they are revoking
	members := map[string]*member{"m1": cl.start("m1", h.handler("m1", work))}

	type result struct{ committed, aborted []int64 }
	done := make(chan result, 1)
	go func() {
		var r result
		recs := testutil.KeyedRecords(40*30, 30)
		for i := range 40 {
			offs := tp.write(recs[i*30 : (i+1)*30])
			tp.end(i%2 == 0)
			if i%2 == 0 {
				r.committed = append(r.committed, offs...)
			} else {
				r.aborted = append(r.aborted, offs...)
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- r
	}()
	for _, id := range []string{"m2", "m3", "-m3", "-m2"} {
		time.Sleep(400 * time.Millisecond)
		if id[0] == '-' {
			members[id[1:]].stop(t)
			continue
		}
		members[id] = cl.start(id, h.handler(id, work))
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("transactions not written after 60s")
	}
	end := logEnd(t, k.Brokers, topic, 0)
	w := watchCommits(t, k.Brokers, cl.group, topic, 1)
	waitFor(t, "the committed offset reaches the log end", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == end
	})
	w.close()
	w.checkMonotonic(t)
	for _, o := range r.aborted {
		if h.handledOffset(topic, o) {
			t.Errorf("aborted record %d handled", o)
		}
	}
	var produced []kafka.TopicPartition
	for _, o := range r.committed {
		topic := topic
		produced = append(produced, kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: kafka.Offset(o)})
	}
	if dups := h.check(produced); dups != 0 {
		t.Errorf("graceful changes ran %d records twice", dups)
	}
}

// TestOpenTransactionHoldsCommit: while a transaction is open, the
// committed offset stops at its first record (the last stable offset) —
// the records after it are not readable yet under read_committed — and
// moves to the log end once it commits.
func TestOpenTransactionHoldsCommit(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const topic = "txn-open"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	tp := newTxnProducer(t, k.Brokers, topic)
	committed, _ := writeTxns(t, tp, 3, 50) // committed, aborted, committed
	open := tp.write(testutil.KeyedRecords(30, 10))
	lso := open[0]
	h := newHistory(t)
	cl.start("a", h.handler("a", 0))
	cl.start("b", h.handler("b", 0))
	waitFor(t, "the committed offset reaches the open transaction", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == lso
	})
	// A few commit rounds later it is still there: nothing of the open
	// transaction is handled, nothing passes it.
	deadline := time.Now().Add(5 * cl.config("x", nil).CommitInterval)
	for time.Now().Before(deadline) {
		if c := testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0]; c != lso {
			t.Fatalf("committed %d while the transaction at %d is open", c, lso)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := h.count(); n != len(committed) {
		t.Fatalf("%d records handled while the transaction is open, want %d", n, len(committed))
	}

	tp.end(true)
	end := logEnd(t, k.Brokers, topic, 0)
	waitFor(t, "the committed offset reaches the log end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == end
	})
	for _, o := range append(committed, open...) {
		if !h.handledOffset(topic, o) {
			t.Errorf("committed record %d never handled", o)
		}
	}
}

// TestLatestStartsAtOpenTransaction: a new group starting at the end of
// the log (AutoOffsetReset "latest") under read_committed starts at the
// last stable offset, as a Kafka consumer's auto.offset.reset=latest does:
// the records of a transaction open at the start are handled once it
// commits, and those before it are not. Starting at the log end (the
// high watermark) would skip the transaction.
func TestLatestStartsAtOpenTransaction(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const topic = "txn-latest"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	cl.mutate = func(c *consumer.Config) { c.AutoOffsetReset = "latest" }
	tp := newTxnProducer(t, k.Brokers, topic)
	before := tp.write(testutil.KeyedRecords(20, 5))
	tp.end(true)
	open := tp.write(testutil.KeyedRecords(30, 10))
	lso := open[0]
	h := newHistory(t)
	cl.start("a", h.handler("a", 0))
	waitFor(t, "a first offset committed", 30*time.Second, func() bool {
		_, ok := testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0]
		return ok
	})
	if c := testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0]; c != lso {
		t.Fatalf("started at %d with a transaction open at %d (log end %d); want its start", c, lso, logEnd(t, k.Brokers, topic, 0))
	}
	tp.end(true)
	end := logEnd(t, k.Brokers, topic, 0)
	waitFor(t, "the committed offset reaches the log end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == end
	})
	h.checkOffsets(t, topic, open, before, "the transaction open at the start handled, the records before it not")
}

// TestReadUncommittedHandlesAborted: a group that sets isolation.level to
// read_uncommitted asks for every record written, aborted ones included;
// they are handled, and the committed offset still reaches the log end.
func TestReadUncommittedHandlesAborted(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const topic = "txn-read-uncommitted"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	committed, aborted := writeTxns(t, newTxnProducer(t, k.Brokers, topic), 6, 50)
	end := logEnd(t, k.Brokers, topic, 0)
	cl.mutate = func(c *consumer.Config) { c.Kafka["isolation.level"] = "read_uncommitted" }
	h := newHistory(t)
	cl.start("a", h.handler("a", 0))
	waitFor(t, "the committed offset reaches the log end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == end
	})
	for _, o := range append(committed, aborted...) {
		if !h.handledOffset(topic, o) {
			t.Errorf("record %d never handled", o)
		}
	}
}

// TestCompactedPendingRecord: a range's records are pending (its owner never
// finished key-7) when the owner leaves; then the log cleaner removes them
// (later records of key-7 supersede them). The next owner seeks to the first
// of them and never receives it: the records it does receive prove them
// gone, it drops them from pending, handles what is in the log, and the
// committed offset reaches the end.
//
// It needs a broker that compacts on demand (kfake's Compact); on a real
// broker the cleaner runs on its own schedule, so the test is kfake-only
// for now.
func TestCompactedPendingRecord(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const topic = "compacted"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	if k.Cluster == nil {
		t.Skip("needs kfake's Compact")
	}
	setTopicConfig(t, k.Brokers, topic, "cleanup.policy", "compact")
	cl.mutate = func(c *consumer.Config) { c.DrainTimeout = time.Second }
	h := newHistory(t)
	inner := h.handler("a", 0)
	a := cl.start("a", func(ctx context.Context, m *kafka.Message) error {
		if string(m.Key) == "key-7" {
			<-ctx.Done() // key-7 stays pending
			return ctx.Err()
		}
		return inner(ctx, m)
	})
	// A first record no later one supersedes keeps the log start at 0:
	// compaction opens gaps in the middle of the log, it does not delete
	// its front.
	testutil.Produce(t, k.Brokers, topic, []testutil.Record{{Key: []byte("first"), Value: []byte("first:0")}})
	recs := testutil.KeyedRecords(1100, 100)
	first := testutil.Produce(t, k.Brokers, topic, recs[:1000])
	waitFor(t, "every key but key-7 handled", 30*time.Second, func() bool { return h.count() == 1+1000-10 })
	a.stop(t)

	// One more record per key, then compaction: every record of the first
	// thousand is superseded, key-7's pending ones included. (kfake never
	// compacts the last batch, and only records in the batches it compacts
	// supersede: a last record of its own keeps the later ones out of it.)
	later := testutil.Produce(t, k.Brokers, topic, recs[1000:])
	later = append(later, testutil.Produce(t, k.Brokers, topic, []testutil.Record{{Key: []byte("last"), Value: []byte("last:0")}})...)
	k.Cluster.Compact()
	end := int64(later[len(later)-1].Offset) + 1
	inLog := logOffsets(t, k.Brokers, topic)
	if !inLog[0] {
		t.Fatal("compaction removed the first record, which nothing supersedes")
	}
	for i, tp := range first {
		if string(recs[i].Key) == "key-7" && inLog[int64(tp.Offset)] {
			t.Fatalf("key-7's record %d is still in the log after compaction (%d records in the log)", tp.Offset, len(inLog))
		}
	}

	b := cl.start("b", h.handler("b", 0))
	waitFor(t, "the committed offset reaches the log end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0] == end
	})
	for _, tp := range later {
		if !h.handledOffset(topic, int64(tp.Offset)) {
			t.Errorf("record %d, in the log, never handled", tp.Offset)
		}
	}
	for i, tp := range first {
		if string(recs[i].Key) == "key-7" && h.handledOffset(topic, int64(tp.Offset)) {
			t.Errorf("key-7's record %d handled after it was compacted away", tp.Offset)
		}
	}
	for _, e := range h.orderErrs {
		t.Error(e)
	}
	if n := b.c.Status().RetentionLosses; n != 0 {
		t.Errorf("%d retention loss reports; compaction loses nothing", n)
	}
}

// setTopicConfig sets one topic config through the admin API.
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

// TestPositionAboveLogEnd: the group's committed offset is above the log
// end (the topic was recreated, or its log truncated). The member does not
// jump back on its own: it handles nothing, commits nothing, logs an error,
// and Status().AboveLogEnd names the partition.
func TestPositionAboveLogEnd(t *testing.T) {
	const topic = "above-end"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	testutil.Produce(t, k.Brokers, topic, testutil.KeyedRecords(100, 10))
	commitOffset(t, k.Brokers, cl.group, topic, 5000)
	h := newHistory(t)
	m := cl.start("a", h.handler("a", 0))
	waitFor(t, "the partition reported above its log end", 30*time.Second, func() bool {
		return len(m.c.Status().AboveLogEnd) == 1
	})
	got := m.c.Status().AboveLogEnd[0]
	if got.Topic != topic || got.Partition != 0 || got.Position != 5000 || got.LogEnd != 100 {
		t.Errorf("AboveLogEnd = %+v, want %s/0 at 5000, log end 100", got, topic)
	}
	if n := h.count(); n != 0 {
		t.Errorf("%d records handled, want none", n)
	}
	if c := testutil.Committed(t, k.Brokers, cl.group, topic, 1)[0]; c != 5000 {
		t.Errorf("committed %d, want 5000 still", c)
	}
}

// commitOffset commits offset for the group on partition 0, as a plain
// consumer would have.
func commitOffset(t *testing.T, brokers, group, topic string, offset int64) {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": group, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CommitOffsets([]kafka.TopicPartition{{Topic: &[]string{topic}[0], Partition: 0, Offset: kafka.Offset(offset)}}); err != nil {
		t.Fatalf("commit %d for %s: %v", offset, group, err)
	}
}

// logOffsets reads partition 0 of topic from the start to its end with a
// plain consumer and returns the offsets of the records it holds.
func logOffsets(t *testing.T, brokers, topic string) map[int64]bool {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "keyshare-test-read", "enable.partition.eof": true, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetBeginning}}); err != nil {
		t.Fatal(err)
	}
	out := make(map[int64]bool)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			out[int64(ev.TopicPartition.Offset)] = true
		case kafka.PartitionEOF:
			return out
		case kafka.Error:
			t.Fatalf("read %s: %v", topic, ev)
		}
	}
	t.Fatalf("read %s: no end after 30s", topic)
	return nil
}
