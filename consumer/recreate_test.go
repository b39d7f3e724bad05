package consumer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/testutil"
)

// TestRecreatedTopicStartsAfresh: a topic deleted and created again under
// the same name while the group has ledger state for it is a new log. The
// old ledger (next = 100) must not be applied to it — it would pass over the
// new log's first 100 records as done. The leader sees the new topic id,
// drops the old state and starts the topic afresh: every record of the new
// log is handled once, and the committed offset reaches its end.
func TestRecreatedTopicStartsAfresh(t *testing.T) {
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	var mu sync.Mutex
	seen := make(map[string]int) // value → handlings
	cl.start("m1", func(ctx context.Context, m *kafka.Message) error {
		mu.Lock()
		seen[string(m.Value)]++
		mu.Unlock()
		return nil
	})
	count := func(prefix string) (distinct, total int) {
		mu.Lock()
		defer mu.Unlock()
		for v, n := range seen {
			if len(v) >= len(prefix) && v[:len(prefix)] == prefix {
				distinct++
				total += n
			}
		}
		return distinct, total
	}
	records := func(n int, tag string) []testutil.Record {
		recs := testutil.KeyedRecords(n, 10)
		for i := range recs {
			recs[i].Value = append([]byte(tag), recs[i].Value...)
		}
		return recs
	}
	testutil.Produce(t, k.Brokers, "orders", records(100, "old/"))
	waitFor(t, "the old topic's 100 records committed", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, "orders", 1)[0] == 100
	})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	// The leader records the topic's id with its first partition read.
	var oldID string
	if resp, err := cli.Get(t.Context(), "/keyshare/g/topics/orders"); err == nil && len(resp.Kvs) == 1 {
		if rec, err := coord.DecodeTopic(string(resp.Kvs[0].Key), resp.Kvs[0].Value); err == nil {
			oldID = rec.ID
		}
	}

	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": k.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if res, err := admin.DeleteTopics(t.Context(), []string{"orders"}); err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("delete topic: %v %v", err, res)
	}
	waitFor(t, "the topic gone", 30*time.Second, func() bool {
		md, err := admin.GetMetadata(nil, true, 5000)
		_, there := md.Topics["orders"]
		return err == nil && (!there || md.Topics["orders"].Error.Code() != kafka.ErrNoError)
	})
	if err := devcluster.CreateTopics(k.Brokers, map[string]int32{"orders": 1}, 1); err != nil {
		t.Fatal(err)
	}
	testutil.Produce(t, k.Brokers, "orders", records(30, "new/"))

	waitFor(t, "every record of the new log handled", 90*time.Second, func() bool {
		n, _ := count("new/")
		return n == 30
	})
	waitFor(t, "committed == the new log's end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, cl.group, "orders", 1)[0] == 30
	})
	if n, total := count("new/"); n != 30 || total != 30 {
		t.Fatalf("new log: %d records handled %d times, want 30 once each", n, total)
	}
	if n, total := count("old/"); n != 100 || total != 100 {
		t.Fatalf("old log: %d records handled %d times, want 100 once each", n, total)
	}
	if rec := topicRecord(t, cli); oldID == "" || rec.ID == oldID || rec.State != coord.TopicActive {
		t.Fatalf("topic record %+v after the reset, want a new id (old %s) and state active", rec, oldID)
	}
}

func topicRecord(t *testing.T, cli *clientv3.Client) coord.TopicRecord {
	t.Helper()
	var rec coord.TopicRecord
	testutil.WaitFor(t, "the topic record", 30*time.Second, func() bool {
		resp, err := cli.Get(t.Context(), "/keyshare/g/topics/orders")
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		rec, err = coord.DecodeTopic(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
		return err == nil
	})
	return rec
}
