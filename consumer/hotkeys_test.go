package consumer_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
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

// TestHotKeysShownAsKeys: a member handling two slow keys, one readable
// and one holding terminal control and bidi characters, among cold keys,
// shows both by key, escaped, in its Status, in
// keyshare_hot_key_busy_ratio and in hotkeys/<member-id> in etcd, all
// from the same load report. Once the records are done the keys cool:
// Status, the metric's series and the etcd value drop them.
func TestHotKeysShownAsKeys(t *testing.T) {
	testutil.RequireKfake(t, "hot keys measured from the member's handler times; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) { c.LoadReportInterval = 200 * time.Millisecond }
	const readable, hostile = "acct-42", "evil\x1b[2J\u202e"
	shown := map[string]string{readable: "acct-42", hostile: `"evil\x1b[2J\u202e"`}
	var handled atomic.Int64
	m := cl.start("m1", func(ctx context.Context, msg *kafka.Message) error {
		d := time.Millisecond
		if _, hot := shown[string(msg.Key)]; hot {
			d = 6 * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		handled.Add(1)
		return nil
	})
	// 300 records of each slow key, 6 ms each and one at a time (their
	// order): each keeps a worker busy for 1.8 s, several reports.
	var recs []testutil.Record
	for i := range 300 {
		recs = append(recs,
			testutil.Record{Key: []byte(readable), Value: []byte("v"), Partition: 0},
			testutil.Record{Key: []byte(hostile), Value: []byte("v"), Partition: 0},
			testutil.Record{Key: fmt.Appendf(nil, "cold-%d", i%50), Value: []byte("v"), Partition: 0})
	}
	testutil.Produce(t, k.Brokers, "orders", recs)

	cli := testutil.NewEtcdClient(t, cl.endpoints)
	hotKey := schema.Group{Prefix: consumer.DefaultConfig().Prefix, Name: cl.group}.Keys().HotKeys("m1")
	var last string
	waitFor(t, "both slow keys shown by key in Status, the metric and etcd", 30*time.Second, func() bool {
		st := m.c.Status()
		if len(st.Ranges) != 1 {
			last = fmt.Sprintf("ranges %+v", st.Ranges)
			return false
		}
		statusKeys := map[string]consumer.HotKey{}
		for _, h := range st.Ranges[0].HotKeys {
			statusKeys[h.Key] = h
		}
		metrics := scrapeText(t, m.c)
		names := readHotKeys(t, cli, hotKey)
		last = fmt.Sprintf("status %+v\netcd %+v\nmetrics:\n%s", st.Ranges[0].HotKeys, names, metricLines(metrics, "keyshare_hot_key_busy_ratio"))
		for _, text := range shown {
			h, ok := statusKeys[text]
			if !ok || h.BusyPerSec <= 0 || h.Share <= 0 || h.Share > 1 {
				return false
			}
			// The exposition format escapes the label's quotes and
			// backslashes: the text as a Go string literal, which only
			// differs for the hostile key.
			if !strings.Contains(metrics, fmt.Sprintf(`keyshare_hot_key_busy_ratio{group="g",key=%q,partition="0",topic="orders"}`, text)) {
				return false
			}
			if !slices.ContainsFunc(names.Keys, func(n schema.HotKeyName) bool { return n.Key == text && n.Topic == "orders" && n.Partition == 0 }) {
				return false
			}
		}
		return true
	})
	if t.Failed() {
		t.Fatalf("last seen: %s", last)
	}
	t.Logf("seen: %s", last)

	waitFor(t, "every record handled", 30*time.Second, func() bool { return handled.Load() >= int64(len(recs)) })
	waitFor(t, "the cooled keys gone from Status, the metric and etcd", 30*time.Second, func() bool {
		st := m.c.Status()
		metrics := scrapeText(t, m.c)
		names := readHotKeys(t, cli, hotKey)
		last = fmt.Sprintf("status %+v\netcd %+v\nmetrics:\n%s", st.Ranges, names, metricLines(metrics, "keyshare_hot_key_busy_ratio"))
		return len(st.Ranges) == 1 && len(st.Ranges[0].HotKeys) == 0 &&
			metricLines(metrics, "keyshare_hot_key_busy_ratio") == "" && len(names.Keys) == 0
	})
	if t.Failed() {
		t.Fatalf("last seen: %s", last)
	}
}

// scrapeText is the member's /metrics as a scraper reads it.
func scrapeText(t *testing.T, c *consumer.Consumer) string {
	t.Helper()
	rec := httptest.NewRecorder()
	c.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// metricLines are the samples of metric name in a scrape.
func metricLines(scrape, name string) string {
	var out []string
	for line := range strings.Lines(scrape) {
		if strings.HasPrefix(line, name+"{") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "")
}

// readHotKeys reads and decodes a member's hot key names (none if the key
// does not exist).
func readHotKeys(t *testing.T, cli *clientv3.Client, key string) schema.HotKeyNames {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return schema.HotKeyNames{}
	}
	n, err := schema.DecodeHotKeys(key, resp.Kvs[0].Value)
	if err != nil {
		t.Fatalf("hot keys %s: %v", key, err)
	}
	return n
}

// TestHotKeySeriesLeaveWithTheirRange: two slow keys hash to different
// halves of a partition that one member owns; a second member joins and
// takes one half. Once the first member no longer owns the range holding
// a key, its scrape has no series for that key, while the key it kept is
// still there; every series a member exports is of a key in a range it
// owns.
func TestHotKeySeriesLeaveWithTheirRange(t *testing.T) {
	testutil.RequireKfake(t, "hot keys measured from the member's handler times; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	cl, k := newCluster(t, map[string]int32{"orders": 1})
	cl.mutate = func(c *consumer.Config) {
		c.LoadReportInterval = 200 * time.Millisecond
		c.Balance = coord.BalanceWidth // split at the middle of the hash space
	}
	// One slow key in each half of the hash space.
	var slow [2]string
	for i := 0; slow[0] == "" || slow[1] == ""; i++ {
		key := fmt.Sprintf("acct-%d", i)
		if half := ledger.Hash([]byte(key), 0) / (1 << 31); slow[half] == "" {
			slow[half] = key
		}
	}
	handler := func(ctx context.Context, msg *kafka.Message) error {
		d := time.Millisecond
		if string(msg.Key) == slow[0] || string(msg.Key) == slow[1] {
			d = 5 * time.Millisecond
		}
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
		return nil
	}
	m1 := cl.start("m1", handler)
	waitFor(t, "m1 owns the partition", 30*time.Second, func() bool { return len(m1.c.Status().Ranges) == 1 })
	// 1,200 records of each slow key, 5 ms each, one at a time: each keeps
	// a worker busy for 6 s, beyond the join and the handoff.
	var recs []testutil.Record
	for i := range 1200 {
		recs = append(recs, testutil.Record{Key: []byte(slow[0]), Value: []byte("v")}, testutil.Record{Key: []byte(slow[1]), Value: []byte("v")})
		if i%4 == 0 {
			recs = append(recs, testutil.Record{Key: fmt.Appendf(nil, "cold-%d", i%50), Value: []byte("v")})
		}
	}
	testutil.Produce(t, k.Brokers, "orders", recs)
	series := func(m *member, key string) bool {
		return strings.Contains(scrapeText(t, m.c), fmt.Sprintf(`keyshare_hot_key_busy_ratio{group="g",key=%q,`, key))
	}
	waitFor(t, "m1 exports both slow keys", 30*time.Second, func() bool { return series(m1, slow[0]) && series(m1, slow[1]) })

	m2 := cl.start("m2", handler)
	owns := func(m *member, key string) bool {
		h := uint64(ledger.Hash([]byte(key), 0))
		for _, r := range m.c.Status().Ranges {
			if r.Lo <= h && h < r.Hi {
				return true
			}
		}
		return false
	}
	var last string
	waitFor(t, "each slow key's series on the member that owns it only", 30*time.Second, func() bool {
		if len(m1.c.Status().Ranges) != 1 || len(m2.c.Status().Ranges) != 1 {
			last = "ranges not split yet"
			return false
		}
		for _, m := range []*member{m1, m2} {
			for _, key := range slow {
				if series(m, key) != owns(m, key) {
					last = fmt.Sprintf("%s owns %s: %v; exports it: %v\n%s", m.c.ID(), key, owns(m, key), series(m, key), metricLines(scrapeText(t, m.c), "keyshare_hot_key_busy_ratio"))
					return false
				}
			}
		}
		return true
	})
	if t.Failed() {
		t.Fatalf("last seen: %s", last)
	}
}
