package consumer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestRecordsLostToRetention: Kafka deletes records a range has not handled
// — some it had read and left pending, some it had never read. A member with
// RetentionLoss "halt" holds the partition. The next owner, reporting,
// reports exactly those records in etcd (lost/...), moves past them, handles
// everything still in the log, and the committed offset reaches the end. No
// record is skipped without a report.
func TestRecordsLostToRetention(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) { c.DrainTimeout = time.Second }
	h := newHistory(t)
	inner := h.handler("a", 0)
	// a never finishes key-7: its records stay pending in the ledger.
	blockKey7 := func(ctx context.Context, m *kafka.Message) error {
		if string(m.Key) == "key-7" {
			<-ctx.Done()
			return ctx.Err()
		}
		return inner(ctx, m)
	}
	a := cl.start("a", blockKey7)
	recs := testutil.KeyedRecords(2500, 100)
	produced := testutil.Produce(t, k.Brokers, "orders", recs[:2000])
	waitFor(t, "every key but key-7 handled", 60*time.Second, func() bool { return h.count() == len(produced)-20 })
	a.stop(t)

	// 500 more records nobody reads, then the log start moves to 2200: the
	// 20 pending key-7 records and the unread 2000..2199 are deleted.
	produced = append(produced, testutil.Produce(t, k.Brokers, "orders", recs[2000:])...)
	const logStart = 2200
	if err := k.DeleteRecords("orders", 0, logStart); err != nil {
		t.Fatal(err)
	}
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	keys := schema.Group{Prefix: "/keyshare", Name: "g"}.Keys()

	// With RetentionLoss "halt" a member holds the partition: no report,
	// no record handled, the committed offset stays at the first lost
	// record (key-7's first, offset 7).
	cl.mutate = func(c *consumer.Config) { c.DrainTimeout, c.RetentionLoss = time.Second, "halt" }
	halted := cl.start("halt", h.handler("halt", 0))
	waitFor(t, "the partition halted", 30*time.Second, func() bool { return len(halted.c.Status().Halted) == 1 })
	time.Sleep(time.Second) // time for a wrong report or commit to show
	if resp, err := cli.Get(t.Context(), keys.Lost(), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("halted member: %d loss reports (%v), want none", resp.Count, err)
	}
	if c := testutil.Committed(t, k.Brokers, "g", "orders", 1)[0]; c > 7 || h.count() != 2000-20 {
		t.Fatalf("halted member: committed %d (want at most 7), %d handled (want %d)", c, h.count(), 2000-20)
	}
	halted.stop(t)

	cl.mutate = func(c *consumer.Config) { c.DrainTimeout = time.Second }
	b := cl.start("b", h.handler("b", 0))
	waitFor(t, "commit reaches the end", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})

	snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Prefix: "/keyshare", Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Problems) > 0 || len(snap.Losses) != 1 {
		t.Fatalf("loss reports %+v (problems %v), want one", snap.Losses, snap.Problems)
	}
	loss := snap.Losses[0]
	t.Logf("loss report: %+v", loss)
	if loss.Member != "b" || loss.LogStart != logStart || loss.Known() != 20 || loss.Window() != 7 {
		t.Errorf("report by %s, log start %d, %d known pending from %d; want b, %d, 20 from 7", loss.Member, loss.LogStart, loss.Known(), loss.Window(), logStart)
	}
	// Every record is handled or named by the report, never both ways
	// unaccounted; every record still in the log is handled.
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, tp := range produced {
		o := int64(tp.Offset)
		key := recs[i].Key
		handled := h.handled[fmt.Sprintf("orders/0/%d", o)] > 0
		covered := loss.Covers(o, ledger.Hash(key, o))
		switch {
		case o >= logStart && !handled:
			t.Errorf("offset %d is still in the log and was never handled", o)
		case !handled && !covered:
			t.Errorf("offset %d (key %s) was never handled and is not in the loss report", o, key)
		case handled && covered && o >= 2000:
			t.Errorf("offset %d was never read before the deletion, yet handled", o)
		}
	}
	for _, e := range h.orderErrs {
		t.Error(e)
	}
	if n := b.c.Status().RetentionLosses; n != 1 {
		t.Errorf("b's RetentionLosses = %d, want 1", n)
	}
}
