package statestore

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
)

// Lookup returns the state that the records of topic left for m's key,
// from a handler of m, a record of another topic: a join. The topics must
// be co-partitioned (consumer.Config.CoPartitioned), so that the member
// running m holds the same key hash of topic's partition of m's number;
// the range is restored first if the member has no state of it yet. The
// state is what topic's records have made of it so far, with no order
// between the two topics' records: a stream-table join reads the table as
// it stands (docs/state.md).
//
// While one topic's range moves ahead of the other's the member may not
// hold the other's: Lookup returns an error then, and the record is tried
// again.
func (s *Store) Lookup(ctx context.Context, m *kafka.Message, topic string) ([]byte, bool, error) {
	if m == nil || m.Key == nil {
		return nil, false, fmt.Errorf("statestore: Lookup of a record without a key: a null key has no state")
	}
	if m.TopicPartition.Topic != nil && *m.TopicPartition.Topic == topic {
		// Its own topic's state is KeyOf's; a grant of its range would
		// also wait for this very call (grants.go).
		return nil, false, fmt.Errorf("statestore: Lookup of topic %q from one of its own records: read the record's key state with KeyOf", topic)
	}
	f, ok := consumer.FenceOfKey(ctx, topic, m.TopicPartition.Partition, m.Key)
	if !ok {
		return nil, false, fmt.Errorf("statestore: the member holds no range of %s/%d for key %q: a record's context is needed (Lookup from a Store's handler), and the topics co-partitioned (consumer.Config.CoPartitioned); while a range moves this passes", topic, m.TopicPartition.Partition, m.Key)
	}
	g, err := s.grantOf(ctx, f)
	if err != nil {
		return nil, false, err
	}
	defer g.calls.Done()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.table.Get(m.Key)
}
