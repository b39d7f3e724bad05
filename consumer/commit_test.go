package consumer_test

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/testutil"
)

// TestZombieCommitRepaired: a deposed leader that stalled between recording
// an offset in etcd and committing it to Kafka commits it late, below what
// the new leader has committed since; an operator sets the other
// partition's offset above etcd's with Kafka's admin API (what
// kafka-consumer-groups --reset-offsets does). The partitions are idle, so
// no new watermark would move Kafka's offsets again: the leader must find
// both when it rereads Kafka's offsets, commit etcd's offsets again and
// count the repairs.
func TestZombieCommitRepaired(t *testing.T) {
	testutil.ParallelOnKfake(t)
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
	mark := coord.CommitMark("old-leader")
	if _, err := zombie.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 40, Metadata: &mark}}); err != nil {
		t.Fatalf("zombie commit: %v", err)
	}
	admin, err := kafka.NewAdminClientFromConsumer(zombie)
	if err != nil {
		t.Fatal(err)
	}
	res, err := admin.AlterConsumerGroupOffsets(t.Context(), []kafka.ConsumerGroupTopicPartitions{{Group: "g", Partitions: []kafka.TopicPartition{{Topic: &topic, Partition: 1, Offset: 150}}}})
	if err != nil || res.ConsumerGroupsTopicPartitions[0].Partitions[0].Error != nil {
		t.Fatalf("operator's reset with the admin API: %v %v", err, res)
	}
	admin.Close()
	zombie.Close()

	// CommitInterval is 200 ms: a few rounds, with room for a loaded machine.
	// The round commits to Kafka before it reports its repairs, so the
	// counter can trail the offsets Kafka shows: wait for both.
	repairs, got := -1.0, map[int32]int64{}
	defer func() {
		if t.Failed() {
			t.Logf("last seen: Kafka's committed offsets %v, repairs counted %v", got, repairs)
		}
	}()
	waitFor(t, "the leader committing etcd's offset again and counting the repairs", 15*time.Second, func() bool {
		got = testutil.Committed(t, k.Brokers, "g", "orders", 2)
		repairs = m.counter(t, "keyshare_commit_repairs_total")
		return got[0] == 100 && got[1] == 100 && repairs >= 2
	})
	t.Logf("repairs counted: %v", repairs)
}
