package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestLoadReportNamesSlowKey: two members share a partition; one key's
// records take far longer than the others'. The load report of the member
// that owns the key (load/<member-id> in etcd) names its hash as the
// hottest key of the range holding it, with busy time, and lists exactly
// the ranges the member works on. Runs with both handler kinds: in batch
// mode a batch's time is split over its records.
func TestLoadReportNamesSlowKey(t *testing.T) {
	testutil.RequireKfake(t, "the load report a member writes to etcd, from its handlers' times; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) { testLoadReportNamesSlowKey(t, batch) })
	}
}

func testLoadReportNamesSlowKey(t *testing.T, batch bool) {
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	var handled atomic.Int64
	cl.mutate = func(c *consumer.Config) {
		c.LoadReportInterval = 300 * time.Millisecond
		if batch {
			c.BatchHandler, c.Handler = func(ctx context.Context, msgs []*kafka.Message) []error {
				for _, m := range msgs {
					handle(ctx, m)
					handled.Add(1)
				}
				return nil
			}, nil
			c.MaxBatchSize = 4
		}
	}
	const slowKey = "key-7"
	handler := func(ctx context.Context, m *kafka.Message) error {
		handle(ctx, m)
		handled.Add(1)
		return nil
	}
	members := []*member{cl.start("m1", handler), cl.start("m2", handler)}
	waitFor(t, "both members own a range", 30*time.Second, func() bool {
		for _, m := range members {
			if len(activeRanges(m.c.Status())) == 0 {
				return false
			}
		}
		return true
	})

	// 100 keys; the slow key's records take 25 ms each, one at a time (its
	// order), the others' 1 ms: it is the hottest key by far, for about
	// 60 × 25 ms = 1.5 s, several report intervals.
	recs := testutil.KeyedRecords(6000, 100)
	produced := testutil.Produce(t, k.Brokers, "orders", recs)
	slowHash := uint64(ledger.Hash([]byte(slowKey), 0))

	cli := testutil.NewEtcdClient(t, cl.endpoints)
	keys := schema.Group{Prefix: consumer.DefaultConfig().Prefix, Name: cl.group}.Keys()
	var last string
	waitFor(t, "a load report naming the slow key", 60*time.Second, func() bool {
		for _, m := range members {
			r, ok := readLoad(t, cli, keys.Load(m.c.ID()))
			if !ok {
				continue
			}
			i := slices.IndexFunc(r.Ranges, func(rl assign.RangeLoad) bool {
				return rl.Topic == "orders" && rl.Lo <= slowHash && slowHash < rl.Hi
			})
			if i < 0 {
				continue
			}
			rl := r.Ranges[i]
			last = fmt.Sprintf("member %s: %+v", m.c.ID(), rl)
			if len(rl.Hot) == 0 || rl.Hot[0].Hash != slowHash || rl.Hot[0].BusyPerSec <= 0 || rl.BusyPerSec < rl.Hot[0].BusyPerSec || rl.RecordsPerSec <= 0 {
				continue
			}
			if !sameRanges(r.Ranges, activeRanges(m.c.Status())) {
				last = fmt.Sprintf("member %s: report's ranges %+v differ from its own %+v", m.c.ID(), r.Ranges, activeRanges(m.c.Status()))
				continue
			}
			t.Logf("member %s reports %s/%d [%d,%d): %.1f records/s, %.3f busy/s, hot %+v", m.c.ID(), rl.Topic, rl.Partition, rl.Lo, rl.Hi, rl.RecordsPerSec, rl.BusyPerSec, rl.Hot)
			return true
		}
		return false
	})
	if t.Failed() {
		t.Logf("last report seen: %s", last)
	}
	waitFor(t, "every record handled", 60*time.Second, func() bool { return handled.Load() >= int64(len(produced)) })
}

// handle is the test's work: 25 ms for the slow key, 1 ms for the others.
func handle(ctx context.Context, m *kafka.Message) {
	d := time.Millisecond
	if string(m.Key) == "key-7" {
		d = 25 * time.Millisecond
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

func readLoad(t *testing.T, cli *clientv3.Client, key string) (schema.LoadReport, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return schema.LoadReport{}, false
	}
	r, err := schema.DecodeLoad(key, resp.Kvs[0].Value)
	if err != nil {
		t.Fatalf("load report %s: %v", key, err)
	}
	return r, true
}

func activeRanges(s consumer.Status) []consumer.RangeStatus {
	var out []consumer.RangeStatus
	for _, r := range s.Ranges {
		if r.State != schema.StateRevoking {
			out = append(out, r)
		}
	}
	return out
}

func sameRanges(rl []assign.RangeLoad, rs []consumer.RangeStatus) bool {
	if len(rl) != len(rs) {
		return false
	}
	for i := range rl {
		if rl[i].Topic != rs[i].Topic || rl[i].Partition != rs[i].Partition || rl[i].Lo != rs[i].Lo || rl[i].Hi != rs[i].Hi {
			return false
		}
	}
	return true
}
