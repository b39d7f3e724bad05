package consumer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestHugeKeyStuckReport: a record with a 450 KB key of control bytes
// (2.25 MB once escaped) keeps failing with an error that repeats the key.
// Its range is still reported stuck in etcd, the report names the record
// with the key cut short, and no log line about it is longer than a few
// kilobytes.
func TestHugeKeyStuckReport(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	logger, logs := captureLog(t)
	cl.mutate = func(c *consumer.Config) {
		c.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
		c.StuckTimeout = time.Second
		c.DrainTimeout = time.Second // the failing record holds the leave
		c.Logger = logger
	}
	huge := make([]byte, 450_000)
	for i := range huge {
		huge[i] = byte(i % 32) // control bytes: each escapes to \xNN or \n
	}
	cl.start("m", func(_ context.Context, m *kafka.Message) error {
		if len(m.Key) == len(huge) {
			return errors.New("no such customer: " + string(m.Key))
		}
		return nil
	})
	recs := append([]testutil.Record{{Key: huge, Value: []byte("v")}}, testutil.KeyedRecords(5, 5)...)
	testutil.Produce(t, k.Brokers, "orders", recs)

	cli := testutil.NewEtcdClient(t, cl.endpoints)
	var report string
	waitFor(t, "the stuck report in etcd", 20*time.Second, func() bool {
		resp, err := cli.Get(t.Context(), "/keyshare/g/stuck/", clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) == 0 {
			return false
		}
		report = string(resp.Kvs[0].Value)
		return true
	})
	if !strings.Contains(report, `"offset":0`) || !strings.Contains(report, `450000 bytes`) || len(report) > 16<<10 {
		t.Errorf("stuck report (%d bytes) does not name offset 0 with its key cut short: %.300s", len(report), report)
	}
	if logs.count("range held by a stuck record") == 0 {
		t.Errorf("no warning about the stuck range")
	}
	if n := logs.longestLine(); n > 16<<10 {
		t.Errorf("the longest log line is %d bytes", n)
	}
}

// TestStuckWarningSaysWhat: a record whose handler runs on without
// failing holds its range past StuckTimeout. The warning says that its
// handler is running with no attempt failed, not an empty error.
func TestStuckWarningSaysWhat(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	logger, logs := captureLog(t)
	cl.mutate = func(c *consumer.Config) {
		c.StuckTimeout = time.Second
		c.DrainTimeout = time.Second // the running record holds the leave
		c.Logger = logger
	}
	cl.start("m", func(ctx context.Context, m *kafka.Message) error {
		if string(m.Key) == "slow" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	recs := append([]testutil.Record{{Key: []byte("slow"), Value: []byte("v")}}, testutil.KeyedRecords(5, 5)...)
	testutil.Produce(t, k.Brokers, "orders", recs)
	waitFor(t, "the stuck warning", 20*time.Second, func() bool { return logs.count("range held by a stuck record") > 0 })
	if logs.count("range held by a stuck record, its handler running with no attempt failed yet") == 0 || logs.count(`error=""`) > 0 {
		t.Errorf("the stuck warning does not say that the record's handler is running with no attempt failed (or shows an empty error)")
	}
}
