package testutil_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"

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

func TestMain(m *testing.M) { os.Exit(testutil.RunTests(m)) }

// TestKafkaStartsEmpty: a test never sees an earlier test's records or
// committed offsets, also on the Apache backend, where the tests share one
// broker that StartKafka empties.
func TestKafkaStartsEmpty(t *testing.T) {
	for round := range 2 {
		k := testutil.StartKafka(t, map[string]int32{"t": 1})
		if got := testutil.Committed(t, k.Brokers, "g", "t", 1); len(got) != 0 {
			t.Fatalf("round %d: committed offsets %v left from before", round, got)
		}
		tps := testutil.Produce(t, k.Brokers, "t", testutil.KeyedRecords(3, 1))
		if tps[0].Offset != 0 {
			t.Fatalf("round %d: first record at offset %d, want 0", round, tps[0].Offset)
		}
		c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "g", "log_level": 3})
		if err != nil {
			t.Fatal(err)
		}
		topic := "t"
		if _, err := c.CommitOffsets([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 3}}); err != nil {
			t.Fatal(err)
		}
		c.Close()
		if got := testutil.Committed(t, k.Brokers, "g", "t", 1); got[0] != 3 {
			t.Fatalf("round %d: committed %v, want map[0:3]", round, got)
		}
	}
}

// TestDeleteRecords moves the log start on either backend.
func TestDeleteRecords(t *testing.T) {
	k := testutil.StartKafka(t, map[string]int32{"t": 1})
	testutil.Produce(t, k.Brokers, "t", testutil.KeyedRecords(10, 2))
	if err := k.DeleteRecords("t", 0, 4); err != nil {
		t.Fatal(err)
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "g", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	low, high, err := c.QueryWatermarkOffsets("t", 0, 10000)
	if err != nil || low != 4 || high != 10 {
		t.Fatalf("watermarks %d..%d (%v), want 4..10", low, high, err)
	}
}

// TestPostgresServes: the test PostgreSQL starts and answers a query over
// TCP.
func TestPostgresServes(t *testing.T) {
	t.Parallel()
	pg := testutil.StartPostgres(t)
	conn, err := pgx.Connect(t.Context(), pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(t.Context(), "SHOW server_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "18.") {
		t.Fatalf("server_version %q, want 18.x", v)
	}
}
