package consumer_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestLargeEntryFlushedEarly: a range whose ledger entry grows to
// FlushEntryBytes is written at once, not at the next flush interval (here
// an hour away), and the member says so once.
func TestLargeEntryFlushedEarly(t *testing.T) {
	cl, k := newCluster(t, map[string]int32{"big": 1})
	logs := &testutil.Buffer{}
	cl.mutate = func(cfg *consumer.Config) {
		cfg.FlushInterval = time.Hour
		cfg.FlushEntryBytes = 1 << 10
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})
	}
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	// Every record stays in flight: the range's pending offsets, and its
	// entry, grow with each record fetched.
	hold := func(ctx context.Context, _ *kafka.Message) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m := cl.start("m1", hold)
	// The range is taken and its first entry written (a new assignment
	// flushes at once) before any record exists.
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	stored := func() schema.RangeState {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Prefix: "/keyshare", Name: cl.group})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Ranges) != 1 {
			return schema.RangeState{}
		}
		return snap.Ranges[0]
	}
	waitFor(t, "the range to be owned with a ledger entry", 60*time.Second, func() bool { return stored().Entry.Initialized() })
	// A range just acquired also writes at once the first state that moves
	// its watermark (TestFirstProgressFlushedAtOnce); held records never
	// move it, so only their size can bring the entry to etcd early.
	testutil.Produce(t, k.Brokers, "big", testutil.KeyedRecords(400, 400))
	// 400 pending offsets take over 1 KiB: the entry must reach etcd
	// long before the hourly flush.
	defer func() {
		if t.Failed() {
			t.Logf("member log:\n%s", logs.String())
		}
	}()
	waitFor(t, "the large entry to be flushed early", 60*time.Second, func() bool { return stored().Entry.PendingCount() >= 50 })
	if n := strings.Count(logs.String(), "ledger entry reached FlushEntryBytes"); n != 1 {
		t.Fatalf("%d log lines about the large entry, want 1:\n%s", n, logs.String())
	}
	once.Do(func() { close(release) })
	m.stop(t)
}

// TestFirstProgressFlushedAtOnce: a range just acquired writes its first
// progress at once, not at the next flush interval (here an hour away), so
// that a moved range's records can be committed by the leader's next
// commit round.
func TestFirstProgressFlushedAtOnce(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"moved": 1})
	cl.mutate = func(cfg *consumer.Config) { cfg.FlushInterval = time.Hour }
	m := cl.start("m1", func(context.Context, *kafka.Message) error { return nil })
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	watermark := func() int64 {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Prefix: "/keyshare", Name: cl.group})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Ranges) != 1 {
			return -1
		}
		wm, ok := snap.Ranges[0].Entry.Watermark()
		if !ok {
			return -1 // no entry yet (Watermark says 0)
		}
		return wm
	}
	// The range is taken and its first entry written (a new assignment
	// flushes at once) before any record exists.
	waitFor(t, "the range to be owned with a ledger entry", 60*time.Second, func() bool { return watermark() == 0 })
	testutil.Produce(t, k.Brokers, "moved", testutil.KeyedRecords(10, 10))
	waitFor(t, "the first progress in etcd", 60*time.Second, func() bool { return watermark() == 10 })
	m.stop(t)
}
