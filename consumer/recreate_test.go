package consumer_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestRecreatedTopicStartsAfresh: a topic deleted and created again under
// the same name while the group has ledger state for it is a new log. The
// old ledger (next = 100) must not be applied to it — it would pass over the
// new log's first 100 records as done. The leader sees the new topic id,
// drops the old state and starts the topic afresh: every record of the new
// log is handled once, and the committed offset reaches its end. The new
// topic has fewer partitions (1, not 3): on a broker that keeps a deleted
// topic's group offsets (simulated on kfake; kfake and Apache Kafka drop
// them), the group's offsets of the old partitions 1 and 2 are deleted, or
// partitions added later would start at them.
func TestRecreatedTopicStartsAfresh(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 3})
	// The leader reads topic ids with the partition counts: every second
	// here, not every PartitionRefresh's default 10 s.
	cl.mutate = func(c *consumer.Config) { c.PartitionRefresh = time.Second }
	seen := &handlings{n: make(map[string]int)}
	cl.start("m1", seen.handle)
	count := func(prefix string) (distinct, total int) {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		for v, n := range seen.n {
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
	old := records(120, "old/")
	for i := range old[100:] {
		old[100+i].Partition = int32(1 + i%2)
	}
	testutil.Produce(t, k.Brokers, "orders", old)
	waitFor(t, "the old topic's 120 records committed", 60*time.Second, func() bool {
		c := testutil.Committed(t, k.Brokers, cl.group, "orders", 3)
		return c[0] == 100 && c[1] == 10 && c[2] == 10
	})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	// The leader records the topic's id with its first partition read.
	var oldID string
	if resp, err := cli.Get(t.Context(), "/keyshare/g/topics/orders"); err == nil && len(resp.Kvs) == 1 {
		if rec, err := schema.DecodeTopic(string(resp.Kvs[0].Key), resp.Kvs[0].Value); err == nil {
			oldID = rec.ID
		}
	}

	admin, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": k.Brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var kept *keptOffsets
	if k.Cluster != nil {
		kept = keepDeletedOffsets(k.Cluster, cl.group, "orders")
	}
	if res, err := admin.DeleteTopics(t.Context(), []string{"orders"}); err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("delete topic: %v %v", err, res)
	}
	if kept != nil {
		kept.keep(map[int32]int64{1: 10, 2: 10})
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
	if n, total := count("old/"); n != 120 || total != 120 {
		t.Fatalf("old log: %d records handled %d times, want 120 once each", n, total)
	}
	res, err := admin.ListConsumerGroupOffsets(t.Context(), []kafka.ConsumerGroupTopicPartitions{{Group: cl.group}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.ConsumerGroupsTopicPartitions[0].Partitions {
		if *p.Topic == "orders" && p.Partition > 0 && p.Offset >= 0 {
			t.Errorf("the group still has offset %d for orders/%d, a partition of the old topic only", p.Offset, p.Partition)
		}
	}
	if kept != nil {
		if d := kept.deletedPartitions(); !slices.Equal(d, []int32{1, 2}) {
			t.Errorf("OffsetDelete requests named orders partitions %v, want [1 2]", d)
		}
	}
	if rec := topicRecord(t, cli); oldID == "" || rec.ID == oldID || rec.State != schema.TopicActive {
		t.Fatalf("topic record %+v after the reset, want a new id (old %s) and state active", rec, oldID)
	}
}

// handlings counts how often the handler ran each record value.
type handlings struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *handlings) handle(_ context.Context, m *kafka.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[string(m.Value)]++
	return nil
}

func topicRecord(t *testing.T, cli *clientv3.Client) schema.TopicRecord {
	t.Helper()
	var rec schema.TopicRecord
	testutil.WaitFor(t, "the topic record", 30*time.Second, func() bool {
		resp, err := cli.Get(t.Context(), "/keyshare/g/topics/orders")
		if err != nil || len(resp.Kvs) != 1 {
			return false
		}
		rec, err = schema.DecodeTopic(string(resp.Kvs[0].Key), resp.Kvs[0].Value)
		return err == nil
	})
	return rec
}

// keptOffsets makes kfake answer as a broker that keeps a deleted topic's
// group offsets would: once keep is called, a listing of the group's
// offsets (an OffsetFetch naming no topic) shows the kept offsets of the
// topic, each until an OffsetDelete names it.
type keptOffsets struct {
	mu      sync.Mutex
	kept    map[int32]int64
	deleted []int32 // partitions of the topic named in OffsetDelete requests
}

func keepDeletedOffsets(fake *kfake.Cluster, group, topic string) *keptOffsets {
	ko := &keptOffsets{}
	fake.ControlKey(kmsg.OffsetFetch.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := kr.(*kmsg.OffsetFetchRequest)
		listing := req.Version < 8 && req.Group == group && req.Topics == nil ||
			req.Version >= 8 && len(req.Groups) == 1 && req.Groups[0].Group == group && req.Groups[0].Topics == nil
		ko.mu.Lock()
		defer ko.mu.Unlock()
		if !listing || ko.kept == nil || req.Version >= 10 { // v10 names topics by id
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		if req.Version >= 8 {
			g := kmsg.NewOffsetFetchResponseGroup()
			g.Group = group
			gt := kmsg.NewOffsetFetchResponseGroupTopic()
			gt.Topic = topic
			for p, o := range ko.kept {
				gp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				gp.Partition, gp.Offset = p, o
				gt.Partitions = append(gt.Partitions, gp)
			}
			g.Topics = append(g.Topics, gt)
			resp.Groups = append(resp.Groups, g)
		} else {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = topic
			for p, o := range ko.kept {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset = p, o
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	fake.ControlKey(kmsg.OffsetDelete.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		req := kr.(*kmsg.OffsetDeleteRequest)
		ko.mu.Lock()
		defer ko.mu.Unlock()
		for _, rt := range req.Topics {
			for _, rp := range rt.Partitions {
				if req.Group == group && rt.Topic == topic {
					ko.deleted = append(ko.deleted, rp.Partition)
					delete(ko.kept, rp.Partition)
				}
			}
		}
		return nil, nil, false // kfake answers
	})
	return ko
}

func (ko *keptOffsets) keep(offsets map[int32]int64) {
	ko.mu.Lock()
	defer ko.mu.Unlock()
	ko.kept = offsets
}

// deletedPartitions is the partitions deleted, sorted, each once.
func (ko *keptOffsets) deletedPartitions() []int32 {
	ko.mu.Lock()
	defer ko.mu.Unlock()
	d := slices.Clone(ko.deleted)
	slices.Sort(d)
	return slices.Compact(d)
}

// TestForgedTopicIDKeepsState: a well-formed topics/ record naming another
// topic id, written raw next to a running group, is etcd's word alone: Kafka
// still reports the topic's own id and holds the group's committed offsets
// of it. The leader must not take the topic for recreated (which would
// delete every range, ledger and commit record and run every record
// again): it logs one error, rewrites the record with Kafka's id and keeps
// the group's state.
func TestForgedTopicIDKeepsState(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 2})
	// The leader reads topic ids with the partition counts: every second
	// here, not every PartitionRefresh's default 10 s.
	cl.mutate = func(c *consumer.Config) { c.PartitionRefresh = time.Second }
	seen := &handlings{n: make(map[string]int)}
	cl.start("m1", seen.handle)
	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(100, 10))
	waitFor(t, "100 records committed", 60*time.Second, func() bool {
		c := testutil.Committed(t, k.Brokers, cl.group, "orders", 2)
		return c[0]+c[1] == 100
	})
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	real := topicRecord(t, cli)
	const forged = "Zm9yZ2VkLXRvcGljLWlkAA"
	if _, err := cli.Put(t.Context(), "/keyshare/g/topics/orders", `{"v":1,"topic":"orders","id":"`+forged+`","state":"active","at":"2026-01-01T00:00:00Z"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the record rewritten with Kafka's id", 60*time.Second, func() bool {
		return topicRecord(t, cli).ID == real.ID
	})
	more := testutil.KeyedRecords(20, 10)
	for i := range more {
		more[i].Value = append([]byte("after/"), more[i].Value...)
	}
	testutil.Produce(t, k.Brokers, "orders", more)
	waitFor(t, "the 20 new records committed", 60*time.Second, func() bool {
		c := testutil.Committed(t, k.Brokers, cl.group, "orders", 2)
		return c[0]+c[1] == 120
	})
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for v, n := range seen.n {
		if n != 1 {
			t.Errorf("record %q handled %d times after a forged topic id, want once", v, n)
		}
	}
	if resp, err := cli.Get(t.Context(), "/keyshare/g/commits/orders/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 2 {
		t.Errorf("commit records of orders: %v (%v), want both kept", resp.Count, err)
	}
}
