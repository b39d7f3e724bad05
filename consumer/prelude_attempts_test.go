package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// preludeRig is a rig owning the whole of partition 0, with a dead-letter
// topic and three attempts per record, and a record of key k for a
// prelude to handle.
func preludeRig(t *testing.T, h Handler) (*rig, *kafka.Message, uint32) {
	t.Helper()
	r := newRig(t, h, false, func(c *Config) {
		createTopic(t, c.Kafka["bootstrap.servers"].(string), "t.dlq")
		c.DeadLetterTopic = "t.dlq"
		c.Retry = RetryPolicy{MaxAttempts: 3, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
	})
	r.put(r.full(schema.StateActive), initialized(0))
	a, err := r.sess.ReadAssignment(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.p.reconcile(a); err != nil {
		t.Fatal(err)
	}
	topic := rigTopic
	m := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 0, Offset: 7}, Key: []byte("k"), Value: []byte("v")}
	return r, m, ledger.Hash(m.Key, 0)
}

// createTopic creates topic with one partition.
func createTopic(t *testing.T, brokers, topic string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, []kafka.TopicSpecification{{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("create %s: %v", topic, res[0].Error)
	}
}

// TestPreludeFencedAnswersDoNotCount: a prelude's record answered fenced
// twice, then refused once, then done, with three attempts allowed and a
// dead-letter topic: fenced answers never count towards the limit
// (docs/delivery.md), so the record is handled at its fourth call and
// not dead-lettered.
func TestPreludeFencedAnswersDoNotCount(t *testing.T) {
	testutil.RequireKfake(t, "a prelude's attempts; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	var calls atomic.Int32
	r, m, h := preludeRig(t, func(context.Context, *kafka.Message) error {
		switch calls.Add(1) {
		case 1, 2:
			return fmt.Errorf("a newer owner wrote: %w", ErrFenced)
		case 3:
			return errors.New("refused")
		}
		return nil
	})
	if err := r.p.handleAlone(t.Context(), tp{Topic: rigTopic}, m, h, &preludeRun{}); err != nil {
		t.Fatalf("handleAlone = %v, want nil", err)
	}
	if n, dl := calls.Load(), r.c.metrics.deadLettered.Load(); n != 4 || dl != 0 {
		t.Errorf("%d handler calls, %d dead-lettered; want 4 calls and none dead-lettered (two fenced answers and one refusal are one failed attempt)", n, dl)
	}
}

// TestPreludeCallsOnlyWhileLive: once the member's session is no longer
// live, a prelude calls the handler no more, even before the context it
// runs under ends (the goroutine that ends it may run late).
func TestPreludeCallsOnlyWhileLive(t *testing.T) {
	testutil.RequireKfake(t, "a prelude's attempts; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	var calls atomic.Int32
	r, m, h := preludeRig(t, func(context.Context, *kafka.Message) error {
		calls.Add(1)
		return nil
	})
	if err := r.sess.Close(); err != nil {
		t.Fatal(err)
	}
	err := r.p.handleAlone(context.Background(), tp{Topic: rigTopic}, m, h, &preludeRun{})
	if n := calls.Load(); n != 0 || !errors.Is(err, errNotOwner) {
		t.Errorf("after the session ended: %d handler calls, handleAlone = %v; want none, errNotOwner", n, err)
	}
}

// TestPreludeFenceOfRange: the context a prelude's record is handled
// under answers FenceOf with the range that holds its key and that
// range's token.
func TestPreludeFenceOfRange(t *testing.T) {
	testutil.RequireKfake(t, "a prelude's attempts; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	var got Fence
	var ok bool
	r, m, h := preludeRig(t, func(ctx context.Context, m *kafka.Message) error {
		got, ok = FenceOf(ctx, m)
		return nil
	})
	if err := r.p.handleAlone(t.Context(), tp{Topic: rigTopic}, m, h, &preludeRun{}); err != nil {
		t.Fatal(err)
	}
	want := r.stored()
	if !ok || got.Topic != rigTopic || got.Lo != 0 || got.Hi != ledger.HashSpace || got.Token != want.Rev {
		t.Errorf("FenceOf = %+v, %v; want the range [0, %d) of %s at token %d", got, ok, uint64(ledger.HashSpace), rigTopic, want.Rev)
	}
}
