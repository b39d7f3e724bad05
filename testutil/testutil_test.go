package testutil_test

import (
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/testutil"
)

func TestEtcdServes(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	if _, err := cli.Put(t.Context(), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(t.Context(), "/k")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("get /k = %v, want v", resp.Kvs)
	}
	if len(e.Endpoints) != 1 || e.Endpoints[0] == "http://127.0.0.1:0" {
		t.Fatalf("endpoints %v: want the real port", e.Endpoints)
	}
}

// TestKafkaProduceFetchCommit checks the path keyshare relies on: records
// produced through librdkafka are fetched in assign mode, and a standalone
// commit from a consumer that never joins the group is read back by a
// separate admin client.
func TestKafkaProduceFetchCommit(t *testing.T) {
	k := testutil.StartKafka(t, map[string]int32{"t": 2})
	recs := testutil.KeyedRecords(50, 5)
	for i := range recs {
		recs[i].Partition = int32(i % 2)
	}
	tps := testutil.Produce(t, k.Brokers, "t", recs)
	if tps[0].Offset != 0 || tps[2].Offset != 1 || tps[1].Partition != 1 {
		t.Fatalf("unexpected offsets: %v %v %v", tps[0], tps[1], tps[2])
	}

	c, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":  k.Brokers,
		"group.id":           "g",
		"enable.auto.commit": false,
		"log_level":          3,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := "t"
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 10}}); err != nil {
		t.Fatal(err)
	}
	got := 0
	deadline := time.Now().Add(30 * time.Second)
	for got < 15 && time.Now().Before(deadline) {
		ev := c.Poll(100)
		if m, ok := ev.(*kafka.Message); ok {
			if want := int64(10 + got); int64(m.TopicPartition.Offset) != want {
				t.Fatalf("fetched offset %d, want %d", m.TopicPartition.Offset, want)
			}
			got++
		}
	}
	if got != 15 {
		t.Fatalf("fetched %d records of partition 0 from offset 10, want 15", got)
	}
	if _, err := c.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 17}}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Committed(t, k.Brokers, "g", "t", 2); len(got) != 1 || got[0] != 17 {
		t.Fatalf("committed = %v, want map[0:17]", got)
	}
}
