package consumer_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// groupLabel is the group label every keyshare metric carries.
var groupLabel = regexp.MustCompile(`group="[^"]*",?`)

// scrape reads the samples of a metrics endpoint, the group label left out.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name = groupLabel.ReplaceAllString(name, "") // one member, one group
		name = strings.TrimSuffix(name, "{}")
		v, err := strconv.ParseFloat(val, 64)
		if err == nil {
			out[name] = v
		}
	}
	return out
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestMetricsHealthAndStuckKeys scrapes a member's metrics endpoint and
// checks the values against what the test did: records handled, one record
// dead-lettered, one key stuck (reported in etcd, then cleared when it
// finishes), and the health endpoints.
func TestMetricsHealthAndStuckKeys(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	cl.topics = []string{"orders"}
	cl.mutate = func(c *consumer.Config) {
		c.DeadLetterTopic = "orders.dlq"
		c.Retry = consumer.RetryPolicy{MaxAttempts: 2, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
		c.StuckTimeout = time.Second
		c.MetricsAddr = "127.0.0.1:0"
	}
	h := newHistory(t)
	inner := h.handler("m", 0)
	release := make(chan struct{})
	var blockedAt atomic.Int64 // the blocked record's offset
	blockedAt.Store(-1)
	// when the handler blocked, with the monotonic clock's reading, as
	// Status's times have it
	var blockedWhen atomic.Pointer[time.Time]
	m := cl.start("m", func(ctx context.Context, msg *kafka.Message) error {
		if msg.TopicPartition.Offset == 10 {
			return io.ErrUnexpectedEOF // poison: dead-lettered after 2 attempts
		}
		if string(msg.Key) == "key-3" && blockedAt.CompareAndSwap(-1, int64(msg.TopicPartition.Offset)) {
			now := time.Now()
			blockedWhen.Store(&now)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inner(ctx, msg)
	})
	waitFor(t, "metrics server", 20*time.Second, func() bool { return m.c.MetricsAddr() != "" })
	addr := m.c.MetricsAddr()
	waitFor(t, "ready", 30*time.Second, func() bool { code, _ := get(t, "http://"+addr+"/readyz"); return code == 200 })
	if code, body := get(t, "http://"+addr+"/healthz"); code != 200 {
		t.Fatalf("/healthz: %d %s", code, body)
	}

	beforeProduce := time.Now()
	produced := testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(200, 20))
	// key-3 has 10 records, all behind the blocked one; offset 10 (key-10)
	// is dead-lettered.
	waitFor(t, "the other records", 60*time.Second, func() bool { return h.count() == len(produced)-11 })
	waitFor(t, "stuck detection", 30*time.Second, func() bool { return scrape(t, addr)["keyshare_stuck_ranges"] == 1 })
	mt := scrape(t, addr)
	for name, want := range map[string]float64{
		"keyshare_records_handled_total":       float64(len(produced) - 11),
		"keyshare_records_dead_lettered_total": 1,
		"keyshare_records_failed_total":        2,
		"keyshare_session":                     1,
		"keyshare_leader":                      1,
		"keyshare_stuck_ranges":                1,
	} {
		if mt[name] != want {
			t.Errorf("%s = %v, want %v", name, mt[name], want)
		}
	}
	// The blocked key's ten records hold the committed offset back.
	waitFor(t, "the leader's backlog", 30*time.Second, func() bool { return scrape(t, addr)["keyshare_group_backlog"] >= 10 })
	if b := scrape(t, addr)["keyshare_group_backlog"]; b > float64(len(produced)) {
		t.Errorf("keyshare_group_backlog = %v, more than the %d records produced", b, len(produced))
	}
	if mt["keyshare_in_flight"] < 1 {
		t.Errorf("keyshare_in_flight = %v, want at least the blocked record", mt["keyshare_in_flight"])
	}
	st := m.c.Status()
	if len(st.StuckKeys) == 0 || st.StuckKeys[0].Key != "key-3" {
		t.Fatalf("Status().StuckKeys = %+v, want key-3 first", st.StuckKeys)
	}
	// The stuck record was queued after the produce began and before its
	// handler started; its range's oldest record was queued no later.
	started := blockedWhen.Load()
	if started == nil {
		t.Fatal("key-3 reported stuck before its handler started")
	}
	since := st.StuckKeys[0].Since
	if since.Before(beforeProduce) || since.After(*started) {
		t.Errorf("stuck key-3 since %v; want between the produce (%v) and its handler's start (%v)", since, beforeProduce, *started)
	}
	if len(st.Ranges) != 1 || st.Ranges[0].OldestSince.IsZero() || st.Ranges[0].OldestSince.After(since) || st.Ranges[0].OldestSince.Before(beforeProduce) {
		t.Errorf("Status().Ranges = %+v; want one range whose oldest record was queued between the produce (%v) and the stuck record (%v)", st.Ranges, beforeProduce, since)
	}
	cli := testutil.NewEtcdClient(t, cl.endpoints)
	resp, err := cli.Get(t.Context(), "/keyshare/g/stuck/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("stuck reports in etcd: %v %v", resp, err)
	}
	if v := string(resp.Kvs[0].Value); !strings.Contains(v, `"key":"key-3"`) || !strings.Contains(v, `"offset":`+strconv.FormatInt(blockedAt.Load(), 10)) {
		t.Fatalf("stuck report %s does not name key-3 at offset %d", v, blockedAt.Load())
	}

	close(release)
	waitFor(t, "all records", 30*time.Second, func() bool { return h.count() == len(produced)-1 })
	waitFor(t, "stuck report cleared", 30*time.Second, func() bool {
		resp, err := cli.Get(t.Context(), "/keyshare/g/stuck/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		return err == nil && resp.Count == 0 && scrape(t, addr)["keyshare_stuck_ranges"] == 0
	})
	waitFor(t, "lag zero", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(produced))
	})
	m.stop(t)
	if code, _ := get(t, "http://"+addr+"/healthz"); code == 200 {
		t.Fatal("/healthz still answers 200 after Run returned")
	}
}
