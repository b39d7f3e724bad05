package statestore

import (
	"context"
	"errors"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/testutil"
)

// countBatch is count for a BatchHandler: a key's records in the batch
// each add one to the count the one before it left.
func countBatch(ctx context.Context, batch []*kafka.Message) []error {
	res := make([]error, len(batch))
	for i, m := range batch {
		res[i] = count(ctx, m)
	}
	return res
}

// TestBatchCountThroughHandoffs: the count kept by a BatchHandler, whose
// batches hold several records of a key, is exactly each key's number of
// records through a scale-out and a leave.
func TestBatchCountThroughHandoffs(t *testing.T) {
	testutil.ParallelOnKfake(t)
	g := newGroup(t, 1)
	var all []testutil.Record
	produce := func(n int) {
		recs := testutil.KeyedRecords(n, 10) // few keys: batches hold runs of one key
		all = append(all, recs...)
		g.waitCommitted(testutil.Produce(t, g.brokers, g.topic, recs))
	}
	a := g.startBatch("a", countBatch)
	produce(1000)
	b := g.startBatch("b", countBatch)
	produce(1000)
	a.stop(t)
	produce(500)
	b.stop(t)
	g.checkCounts(all)
	if sa, sb := a.store.Stats(), b.store.Stats(); sa.Changes+sb.Changes < int64(len(all)) {
		t.Errorf("%d changes appended for %d records", sa.Changes+sb.Changes, len(all))
	}
}

// TestKeyOfOutsideCall: KeyOf answers only for the call's records.
func TestKeyOfOutsideCall(t *testing.T) {
	m := &kafka.Message{}
	if KeyOf(context.Background(), m) != nil {
		t.Fatal("KeyOf answered outside a Store's handler")
	}
	topic := "t"
	in := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Offset: 4}}
	other := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Offset: 5}}
	k := &Key{msg: in, state: &keyState{}}
	ctx := context.WithValue(context.Background(), keyContext{}, k)
	copyOf := *in
	if KeyOf(ctx, &copyOf) != k || KeyOf(ctx, other) != nil {
		t.Fatal("KeyOf of a single call: want the record's Key for it and a copy of it, nil for another record")
	}
	if err := count(context.Background(), in); !errors.Is(err, errNoKey) {
		t.Fatalf("count outside a Store's handler: %v", err)
	}
}
