package deliver

import (
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// maxTracked bounds the records whose failures an attemptCounter keeps.
// Only records failing on this member are kept (a key's failing record
// blocks the key), so the bound is met only when records were
// dead-lettered in great numbers without their entries being dropped;
// then the counts start again from 1, as after a restart.
const maxTracked = 1 << 16

// attemptCounter numbers a record's attempts on this member, for the
// request's "attempt" field. The consumer retries a failed record by
// calling the handler again; the handler counts the failures it returned.
// The number is for the endpoint's logs, not a key to deduplicate on: it
// starts again from 1 on another member or after a restart.
type attemptCounter struct {
	mu     sync.Mutex
	failed map[recordID]int
}

type recordID struct {
	topic     string
	partition int32
	offset    int64
}

func idOf(m *kafka.Message) recordID {
	id := recordID{partition: m.TopicPartition.Partition, offset: int64(m.TopicPartition.Offset)}
	if m.TopicPartition.Topic != nil {
		id.topic = *m.TopicPartition.Topic
	}
	return id
}

// next is the attempt number of each record about to be sent.
func (a *attemptCounter) next(msgs []*kafka.Message) []int {
	out := make([]int, len(msgs))
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, m := range msgs {
		out[i] = a.failed[idOf(m)] + 1
	}
	return out
}

// settle counts the records that failed and drops those done.
func (a *attemptCounter) settle(msgs []*kafka.Message, res []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, m := range msgs {
		id := idOf(m)
		if res[i] == nil {
			delete(a.failed, id)
			continue
		}
		if a.failed == nil || len(a.failed) >= maxTracked {
			a.failed = make(map[recordID]int)
		}
		a.failed[id]++
	}
}

// forget drops records the member stopped working on.
func (a *attemptCounter) forget(msgs []*kafka.Message) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, m := range msgs {
		delete(a.failed, idOf(m))
	}
}
