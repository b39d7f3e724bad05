package consumer_test

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/testutil"
)

// TestZombieCommitRepaired: a deposed leader that stalled between recording
// an offset in etcd and committing it to Kafka commits it late, below what
// the new leader has committed since. The partition is idle, so no new
// watermark would move Kafka's offset again: the leader must find the
// regression when it rereads Kafka's offsets, commit etcd's offset again
// and count the repair.
func TestZombieCommitRepaired(t *testing.T) {
	cl, k := newCluster(t, map[string]int32{"orders": 2})
	h := newHistory(t)
	m := cl.start("m", h.handler("m", 0))
	recs := testutil.KeyedRecords(200, 20)
	for i := range recs {
		recs[i].Partition = int32(i % 2)
	}
	produced := testutil.Produce(t, k.Brokers, "orders", recs)
	waitFor(t, "all records handled", 60*time.Second, func() bool { return h.count() == len(produced) })
	waitFor(t, "both partitions committed at their end", 30*time.Second, func() bool {
		got := testutil.Committed(t, k.Brokers, "g", "orders", 2)
		return got[0] == 100 && got[1] == 100
	})

	// The zombie's late commit: a standalone commit for the group, from
	// another client, of an offset below the one etcd records.
	zombie, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "g", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	topic := "orders"
	if _, err := zombie.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 40}}); err != nil {
		t.Fatalf("zombie commit: %v", err)
	}
	zombie.Close()

	// CommitInterval is 200 ms: a few rounds, with room for a loaded machine.
	waitFor(t, "the leader committing etcd's offset again", 15*time.Second, func() bool {
		got := testutil.Committed(t, k.Brokers, "g", "orders", 2)
		return got[0] == 100 && got[1] == 100
	})
	mfs, err := m.c.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	repairs := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "keyshare_commit_repairs_total" {
			repairs = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if repairs < 1 {
		t.Fatalf("keyshare_commit_repairs_total = %v, want at least 1", repairs)
	}
	t.Logf("repairs counted: %v", repairs)
}
