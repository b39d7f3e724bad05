package consumer_test

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/testutil"
)

// TestScale256Partitions (the short form of the large-group benchmark, which
// make bench runs): 256 partitions, 3 members. Every partition's committed
// offset reaches its end, then one member leaves gracefully and the others
// take its ranges: the records produced after are handled, committed to the
// end, with no record run twice and no committed offset going back.
func TestScale256Partitions(t *testing.T) {
	testutil.ParallelOnKfake(t)
	const parts = 256
	cl, k := newCluster(t, map[string]int32{"orders": parts})
	h := newHistory(t)
	cl.start("a", h.handler("a", 0))
	cl.start("b", h.handler("b", 0))
	c := cl.start("c", h.handler("c", 0))
	w := watchCommits(t, k.Brokers, "g", "orders", parts)

	produce := func(n int, round string) []kafka.TopicPartition {
		recs := testutil.KeyedRecords(n, 4*parts)
		for i := range recs {
			recs[i].Partition = int32(i % parts)
			recs[i].Key = append([]byte(round), recs[i].Key...) // a fresh sequence per key
		}
		return testutil.Produce(t, k.Brokers, "orders", recs)
	}
	atEnd := func(end int64) func() bool {
		return func() bool {
			got := testutil.Committed(t, k.Brokers, "g", "orders", parts)
			if len(got) != parts {
				return false
			}
			for _, o := range got {
				if o != end {
					return false
				}
			}
			return true
		}
	}
	produced := produce(parts*8, "1-")
	waitFor(t, "all records handled", 120*time.Second, func() bool { return h.count() == len(produced) })
	waitFor(t, "every partition committed at its end", 60*time.Second, atEnd(8))

	c.stop(t)
	produced = append(produced, produce(parts*8, "2-")...)
	waitFor(t, "all records handled after c left", 120*time.Second, func() bool { return h.count() == len(produced) })
	waitFor(t, "every partition committed at its new end", 60*time.Second, atEnd(16))
	if dups := h.check(produced); dups != 0 {
		t.Fatalf("%d records handled twice after a graceful leave", dups)
	}
	w.close()
	w.checkMonotonic(t)
}
