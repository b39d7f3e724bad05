package consumer_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestStartOffsetUnreadableIsNotReset: a partition whose committed offset
// Kafka cannot read now (here COORDINATOR_LOAD_IN_PROGRESS on that
// partition, as a broker that is starting answers) is not started at
// AutoOffsetReset as if the group had never committed: at "latest" that
// would skip the records after the committed offset. Its start is
// retried, and once the offset can be read the range starts there.
func TestStartOffsetUnreadableIsNotReset(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const topic = "start-refused"
	cl, k := newCluster(t, map[string]int32{topic: 1})
	fake := k.Fake(t)
	cl.mutate = func(c *consumer.Config) { c.AutoOffsetReset = "latest" }
	testutil.Produce(t, k.Brokers, topic, testutil.KeyedRecords(10, 5))
	commitOffset(t, k.Brokers, cl.group, topic, 5)
	refuse := fake.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetFetch}, Topic: topic, Err: kerr.CoordinatorLoadInProgress, Count: -1})
	h := newHistory(t)
	cl.start("a", h.handler("a", 0))
	time.Sleep(2 * time.Second) // the member tries to start the range, and cannot
	if n := h.count(); n != 0 {
		t.Fatalf("%d records handled while the committed offset could not be read", n)
	}
	refuse.Remove()
	waitFor(t, "the records after the committed offset handled", 30*time.Second, func() bool { return h.count() == 5 })
	for o := range int64(10) {
		if got := h.handledOffset(topic, o); got != (o >= 5) {
			t.Errorf("record %d handled: %v, want %v (committed offset 5)", o, got, o >= 5)
		}
	}
}
