package deliver

import (
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// maxTracked bounds the records whose attempts an attemptCounter keeps
// between handler calls. Only records that failed on this member, or
// whose requests it stopped (their range moved), are kept, so the bound is
// met only when records were dead-lettered or moved away in great numbers
// without their entries being dropped; then the counts start again from
// 1, as after a restart.
const maxTracked = 1 << 16

// attemptCounter numbers the requests that carry a record on this member,
// for the request's "attempt" field: 1 for its first, then one more for
// every request after it, whether the endpoint failed the record (the
// consumer calls the handler again) or did not answer (the handler sends
// it again). An endpoint can refuse a request whose attempt is below one
// it has already seen for the record from the same member and fence. It
// starts again from 1 on another member or after a restart.
type attemptCounter struct {
	mu sync.Mutex
	// last is the attempt of each record's last request, for the records
	// that failed or whose request was stopped.
	last map[recordID]int
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

// first is the attempt of each record in a handler call's first request;
// the call counts its later requests itself.
func (a *attemptCounter) first(msgs []*kafka.Message) []int {
	out := make([]int, len(msgs))
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, m := range msgs {
		out[i] = a.last[idOf(m)] + 1
	}
	return out
}

// settle keeps the last attempt of each record that failed, and drops
// those done.
func (a *attemptCounter) settle(msgs []*kafka.Message, attempts []int, res []error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, m := range msgs {
		id := idOf(m)
		if res[i] == nil {
			delete(a.last, id)
			continue
		}
		if a.last == nil || len(a.last) >= maxTracked {
			a.last = make(map[recordID]int)
		}
		a.last[id] = attempts[i]
	}
}
