package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// outcomes is what a handler answered for one record, in call order.
type outcomes struct {
	mu  sync.Mutex
	got []string
}

// answer is the handler's answer for its next call: fenced the first
// fenced times, refused after that.
func (o *outcomes) answer(fenced int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.got) < fenced {
		o.got = append(o.got, "fenced")
		return fmt.Errorf("sink: %w", consumer.ErrFenced)
	}
	o.got = append(o.got, "refused")
	return errors.New("refused")
}

func (o *outcomes) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.got)
}

// TestFencedAnswersSpendNoAttempt: with the default of 3 attempts and a
// dead-letter topic, a record answered fenced twice and refused after
// that is dead-lettered only after its third refusal, with 3 attempts in
// its headers: a fenced answer says the member may no longer hold the
// range, not that the record failed. The same with a BatchHandler.
func TestFencedAnswersSpendNoAttempt(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testFencedAnswersSpendNoAttempt(t, false) })
	t.Run("batch", func(t *testing.T) { testFencedAnswersSpendNoAttempt(t, true) })
}

func testFencedAnswersSpendNoAttempt(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	cl.topics = []string{"orders"}
	cl.mutate = func(c *consumer.Config) {
		c.DeadLetterTopic = "orders.dlq"
		c.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	}
	var poison outcomes
	handle := func(m *kafka.Message) error {
		if m.TopicPartition.Offset == 0 {
			return poison.answer(2)
		}
		return nil
	}
	if batch {
		cl.startBatch("m", func(_ context.Context, ms []*kafka.Message) []error {
			res := make([]error, len(ms))
			for i, m := range ms {
				res[i] = handle(m)
			}
			return res
		})
	} else {
		cl.start("m", func(_ context.Context, m *kafka.Message) error { return handle(m) })
	}
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(1, 1))
	waitFor(t, "the commit past the record", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	if got, want := poison.list(), []string{"fenced", "fenced", "refused", "refused", "refused"}; !slices.Equal(got, want) {
		t.Errorf("outcomes %v before the dead letter, want %v: a fenced answer spent an attempt", got, want)
	}
	dl := readTopic(t, k.Brokers, "orders.dlq", 1)[0]
	hdr := map[string]string{}
	for _, h := range dl.Headers {
		hdr[h.Key] = string(h.Value)
	}
	if hdr[consumer.HeaderOffset] != "0" || hdr[consumer.HeaderAttempts] != "3" || hdr[consumer.HeaderError] != "refused" {
		t.Errorf("dead-letter headers %v, want offset 0, 3 attempts, error refused", hdr)
	}
}
