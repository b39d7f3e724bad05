package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestDescribeKey: two members share a topic of three partitions; key-3's
// handler fails every time with an error carrying terminal escapes. The
// description of key-3 names the partition the producer put it in, a live
// owner whose range holds its hash, every one of its offsets as pending in
// order, and the stuck report with the error escaped; a key of the same
// partition that was handled shows nothing pending and its last offset as
// handled. Bad queries are refused naming the value.
func TestDescribeKey(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 3})
	recs := testutil.KeyedRecords(200, 10)
	for i := range recs {
		recs[i].Partition = kafka.PartitionAny // librdkafka's default partitioner
	}
	produced := testutil.Produce(t, k.Brokers, "orders", recs)
	offsets := map[string][]int64{} // by key
	partition := map[string]int32{}
	for i, tp := range produced {
		key := string(recs[i].Key)
		offsets[key] = append(offsets[key], int64(tp.Offset))
		partition[key] = tp.Partition
	}
	for key := range offsets {
		slices.Sort(offsets[key])
	}
	for _, id := range []string{"m1", "m2"} {
		startMember(t, e.Endpoints, k.Brokers, id, func(_ context.Context, m *kafka.Message) error {
			if string(m.Key) == "key-3" {
				return errors.New("no such customer \x1b[31mred\x1b[0m\nsecond line")
			}
			return nil
		})
	}

	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	describe := func(key string) admin.KeyInfo {
		t.Helper()
		info, err := g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte(key), Partition: -1})
		if err != nil {
			t.Fatalf("describe %s: %v", key, err)
		}
		return info
	}
	var info admin.KeyInfo
	testutil.WaitFor(t, "key-3 reported stuck", 30*time.Second, func() bool {
		// Until the members join, the group is unknown or has no ranges.
		info, err = g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: -1})
		return err == nil && info.Stuck != nil && info.Range != nil
	})
	t.Logf("key-3: %+v range %+v stuck %+v", info, *info.Range, *info.Stuck)
	if info.Partition != partition["key-3"] || info.PartitionFrom != "consistent_random" {
		t.Errorf("key-3 described in partition %d (%s); the producer wrote it to %d", info.Partition, info.PartitionFrom, partition["key-3"])
	}
	if info.Hash != ledger.Hash([]byte("key-3"), 0) {
		t.Errorf("hash %d, want ledger.Hash of the key", info.Hash)
	}
	r := info.Range
	if (r.Owner != "m1" && r.Owner != "m2") || !r.OwnerLive || r.State != "active" || !(ledger.HashRange{Lo: r.Lo, Hi: r.Hi}).Contains(info.Hash) {
		t.Errorf("range %+v: want a live member's active range holding hash %d", *r, info.Hash)
	}
	if !slices.Equal(info.Pending, offsets["key-3"]) {
		t.Errorf("pending %v, want every key-3 offset %v", info.Pending, offsets["key-3"])
	}
	if r.Watermark != offsets["key-3"][0] {
		t.Errorf("watermark %d, want key-3's first offset %d", r.Watermark, offsets["key-3"][0])
	}
	if !info.Scan.Complete || info.LastHandled != -1 {
		t.Errorf("scan %+v, last handled %d: want a complete scan and no handled record", info.Scan, info.LastHandled)
	}
	s := info.Stuck
	if s.Offset != offsets["key-3"][0] || s.Attempts < 1 || strings.ContainsAny(s.Error, "\x1b\n") || !strings.Contains(s.Error, `no such customer \x1b[31mred`) {
		t.Errorf("stuck %+v: want offset %d, attempts, the error escaped", *s, offsets["key-3"][0])
	}

	// A handled key of the same partition, after key-3's first record.
	var done string
	for key, offs := range offsets {
		if key != "key-3" && partition[key] == partition["key-3"] && offs[len(offs)-1] > offsets["key-3"][0] {
			done = key
		}
	}
	if done == "" {
		t.Fatal("no other key shares key-3's partition after its first record")
	}
	testutil.WaitFor(t, done+" flushed as handled", 20*time.Second, func() bool {
		info = describe(done)
		return len(info.Pending) == 0 && info.LastHandled >= 0
	})
	if want := offsets[done][len(offsets[done])-1]; info.LastHandled != want || info.Stuck != nil {
		t.Errorf("%s: last handled %d, stuck %v; want %d, not stuck", done, info.LastHandled, info.Stuck, want)
	}

	// A bounded scan says it stopped early.
	info, err = g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: -1, MaxScan: 2})
	if err != nil || info.Scan.Complete || info.Scan.Records != 2 || len(info.Pending) > 2 || info.LastHandled != -1 {
		t.Errorf("--max-scan 2: %+v, %v; want 2 records read, the scan incomplete", info, err)
	}

	for _, tc := range []struct {
		q    admin.KeyQuery
		want string
	}{
		{admin.KeyQuery{Topic: "payments", Key: []byte("k"), Partition: -1}, `the group does not consume topic "payments" (its topics: "orders")`},
		{admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 3}, `topic "orders" has partitions 0-2, not 3`},
		{admin.KeyQuery{Topic: "orders", Key: []byte{}, Partition: -1}, "places an empty key at random"},
		{admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: -1, Partitioner: "java"}, `partitioner "java"`},
	} {
		_, err := g.DescribeKey(ctx, tc.q)
		if !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want ErrBadKeyQuery naming %q", tc.q, err, tc.want)
		}
	}
	other, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "nope")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: -1}); !errors.Is(err, admin.ErrUnknownGroup) {
		t.Errorf("unknown group: got %v, want ErrUnknownGroup", err)
	}
}

// TestDescribeKeyLongKeysAlike: a stuck report names its record's key as
// shown, cut at textsafe.MaxKey bytes, so two long keys of one partition
// that differ only past the cut read the same in it. Only the stuck key is
// described as stuck; the other, handled, is not.
func TestDescribeKeyLongKeysAlike(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	head := strings.Repeat("customer/", 40) // 360 bytes, past the cut
	stuck, handled := []byte(head+"A"), []byte(head+"B")
	var recs []testutil.Record
	for i := range 5 {
		recs = append(recs, testutil.Record{Key: handled, Value: fmt.Appendf(nil, "b%d", i)}, testutil.Record{Key: stuck, Value: fmt.Appendf(nil, "a%d", i)})
	}
	testutil.Produce(t, k.Brokers, "orders", recs)
	startMember(t, e.Endpoints, k.Brokers, "m1", func(_ context.Context, m *kafka.Message) error {
		if string(m.Key) == string(stuck) {
			return errors.New("refused")
		}
		return nil
	})
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	var info admin.KeyInfo
	testutil.WaitFor(t, "the first key reported stuck", 30*time.Second, func() bool {
		info, err = g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: stuck, Partition: 0})
		return err == nil && info.Stuck != nil
	})
	if info.Stuck.Offset != 1 {
		t.Errorf("stuck at offset %d, want 1 (the stuck key's first record)", info.Stuck.Offset)
	}
	info, err = g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: handled, Partition: 0})
	if err != nil {
		t.Fatal(err)
	}
	if info.Stuck != nil {
		t.Errorf("the handled key is described as stuck at offset %d: the report is the other key's, which reads the same when cut", info.Stuck.Offset)
	}
}

// startMember runs a member of group g until the test ends, or until the
// returned stop is called (it leaves gracefully); each mutate changes its
// configuration.
func startMember(t *testing.T, etcd []string, brokers, id string, h consumer.Handler, mutate ...func(*consumer.Config)) (stop func()) {
	t.Helper()
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID, cfg.Handler = "g", []string{"orders"}, id, h
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3, "fetch.wait.max.ms": 50}
	cfg.SessionTTL = 2 * time.Second
	cfg.DrainTimeout = time.Second // the failing record holds the leave
	cfg.FlushInterval = 100 * time.Millisecond
	cfg.CommitInterval = 200 * time.Millisecond
	cfg.RebalanceDebounce = 50 * time.Millisecond
	cfg.StuckTimeout = time.Second
	cfg.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	cfg.Logger = testutil.Logger(t)
	for _, m := range mutate {
		m(&cfg)
	}
	c, err := consumer.New(testutil.NewEtcdClient(t, etcd), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Errorf("member %s did not stop within 30s", id)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestStuckReportMatchedByKey: two keys of 300 bytes share their first
// 299, so a stuck report shows them alike. A report naming the second
// key's record, below the range's watermark (stale, outside the
// describe's scan), belongs to the second key only: describing the first
// shows no stuck record, describing the second shows it.
func TestStuckReportMatchedByKey(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	a, b := strings.Repeat("x", 299)+"a", strings.Repeat("x", 299)+"b"
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte(a), Value: []byte("v")}, {Key: []byte(b), Value: []byte("v")}})
	startMember(t, e.Endpoints, k.Brokers, "m1", func(context.Context, *kafka.Message) error { return nil })
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	qa := admin.KeyQuery{Topic: "orders", Key: []byte(a), Partition: 0}
	qb := admin.KeyQuery{Topic: "orders", Key: []byte(b), Partition: 0}
	testutil.WaitFor(t, "both records handled", 30*time.Second, func() bool {
		info, err := g.DescribeKey(t.Context(), qa)
		return err == nil && info.Range != nil && info.Range.Watermark == 2
	})
	rec, err := json.Marshal(schema.StuckRecord{V: 1, Member: "m1", Topic: "orders", Offset: 1, Key: textsafe.Bytes([]byte(b)),
		Since: time.Now().UTC(), Attempts: 3, Error: "no such customer"})
	if err != nil {
		t.Fatal(err)
	}
	if textsafe.Bytes([]byte(a)) != textsafe.Bytes([]byte(b)) {
		t.Fatal("setup: the two keys are shown apart")
	}
	if _, err := cli.Put(t.Context(), "/keyshare/g/stuck/orders/00000/0000000000", string(rec)); err != nil {
		t.Fatal(err)
	}
	ia, err := g.DescribeKey(t.Context(), qa)
	if err != nil {
		t.Fatal(err)
	}
	if ia.Stuck != nil {
		t.Errorf("key a shows the stuck report of key b's record at offset %d", ia.Stuck.Offset)
	}
	ib, err := g.DescribeKey(t.Context(), qb)
	if err != nil {
		t.Fatal(err)
	}
	if ib.Stuck == nil || ib.Stuck.Offset != 1 {
		t.Errorf("key b's stuck report = %+v; want its record at offset 1", ib.Stuck)
	}
}
