package consumer

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyshare/keyshare/testutil"
)

// TestPartitionCountsAsksForItsTopics: the partition counts the leader
// reads every PartitionRefresh come from a Metadata request for the
// group's topics only, never for every topic of the cluster; a topic that
// does not exist is left out.
func TestPartitionCountsAsksForItsTopics(t *testing.T) {
	k := testutil.StartKafka(t, map[string]int32{"a": 2, "b": 3, "other": 5})
	fake := k.Fake(t)
	var (
		mu  sync.Mutex
		all int      // Metadata requests for every topic
		got []string // topics named in Metadata requests
	)
	fake.ControlKey(kmsg.Metadata.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		r := req.(*kmsg.MetadataRequest)
		if r.Topics == nil {
			all++
		}
		for _, tp := range r.Topics {
			if tp.Topic != nil {
				got = append(got, *tp.Topic)
			}
		}
		return nil, nil, false
	})
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "counts", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	c := &Consumer{kc: kc, cfg: Config{StartTimeout: 10 * time.Second, Kafka: kafka.ConfigMap{"bootstrap.servers": k.Brokers}}}
	counts, err := c.partitionCounts(t.Context(), []string{"b", "a", "missing", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 2 || counts["a"] != 2 || counts["b"] != 3 {
		t.Errorf("counts %v, want a: 2 and b: 3 only", counts)
	}
	mu.Lock()
	defer mu.Unlock()
	if all > 0 || slices.Contains(got, "other") {
		t.Errorf("Metadata requests for every topic: %d; topics named: %v; want only the group's", all, got)
	}
}
