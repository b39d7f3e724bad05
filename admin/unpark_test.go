package admin_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/deliver"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// TestUnparkWhileParkingFails: key k is parked and its first record is
// parked; its second is too large for the parking topic, so its owner
// writes it again and again. The key is then unparked: the parked record
// runs first, then the one that could not be parked, each once.
func TestUnparkWhileParkingFails(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testUnparkWhileParkingFails(t, false) })
	t.Run("batch", func(t *testing.T) { testUnparkWhileParkingFails(t, true) })
}

func testUnparkWhileParkingFails(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.park": 1})
	setTopicConfig(t, k.Brokers, "orders.park", "max.message.bytes", "10000")
	var handled handledLog
	h := func(_ context.Context, m *kafka.Message) error {
		handled.add(m)
		return nil
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", h, batchMode(batch, h))
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the member at work", 30*time.Second, func() bool { return len(handled.of("other")) == 1 })
	op, err := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, ParkTopic: "orders.park", By: "ops@test"})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: []byte("small"), Partition: 0}})
	testutil.WaitFor(t, "the first record parked", 30*time.Second, func() bool {
		return len(parked(t, k.Brokers, op.ParkTopic, op.ParkFrom, "k")) == 1
	})
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: bytes.Repeat([]byte("b"), 20_000), Partition: 0}})
	time.Sleep(time.Second) // its parking fails and is tried again
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "both records of k handled", 30*time.Second, func() bool { return len(handled.of("k")) >= 2 })
	time.Sleep(300 * time.Millisecond) // any record handled twice
	if got := handled.of("k"); !slices.Equal(got, []int64{1, 2}) {
		t.Errorf("k handled at %v; want [1 2]: its parked record before the one that could not be parked", got)
	}
}

// setTopicConfig sets one configuration of topic.
func setTopicConfig(t *testing.T, brokers, topic, key, value string) {
	t.Helper()
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, err := a.IncrementalAlterConfigs(ctx, []kafka.ConfigResource{{
		Type: kafka.ResourceTopic, Name: topic,
		Config: []kafka.ConfigEntry{{Name: key, Value: value, IncrementalOperation: kafka.AlterConfigOpTypeSet}},
	}})
	if err != nil {
		t.Fatalf("set %s=%s on %s: %v", key, value, topic, err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			t.Fatalf("set %s=%s on %s: %v", key, value, topic, r.Error)
		}
	}
}

// TestUnparkPreludeStopsAtDrainBudget: two keys, one in each half of the
// partition's hash space, are parked with a record their handler always
// fails (no dead-letter topic), then unparked: with no live record, each
// prelude runs on its own, retrying. A second member joins and takes one
// half. Once the drain budget is spent and the range released, the first
// member no longer calls the handler on the moved key's record: its next
// owner runs it now.
func TestUnparkPreludeStopsAtDrainBudget(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	var mu sync.Mutex
	attempts := map[string]int{} // by member and key
	handler := func(member string) consumer.Handler {
		return func(_ context.Context, m *kafka.Message) error {
			if string(m.Value) != "bad" {
				return nil
			}
			mu.Lock()
			attempts[member+"/"+string(m.Key)]++
			mu.Unlock()
			return errors.New("cannot handle it")
		}
	}
	attemptsOf := func(member, key string) int {
		mu.Lock()
		defer mu.Unlock()
		return attempts[member+"/"+key]
	}
	low, high := "", ""
	for i := 0; low == "" || high == ""; i++ {
		key := "key-" + strconv.Itoa(i)
		if ledger.Hash([]byte(key), 0) < 1<<31 {
			low = cmp.Or(low, key)
		} else {
			high = cmp.Or(high, key)
		}
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", handler("m1"))
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the commit past the first record", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 1
	})
	ops := map[string]admin.KeyOp{}
	for _, key := range []string{low, high} {
		q := admin.KeyQuery{Topic: "orders", Key: []byte(key), Partition: 0}
		if ops[key], err = g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, ParkTopic: "orders.park-" + key, By: "ops@test"}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the parks
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte(low), Value: []byte("bad"), Partition: 0}, {Key: []byte(high), Value: []byte("bad"), Partition: 0}})
	for _, key := range []string{low, high} {
		testutil.WaitFor(t, key+" parked", 30*time.Second, func() bool {
			return len(parked(t, k.Brokers, ops[key].ParkTopic, ops[key].ParkFrom, key)) == 1
		})
		if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: admin.KeyQuery{Topic: "orders", Key: []byte(key), Partition: 0}, By: "ops@test"}); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, key+"'s parked record retried", 30*time.Second, func() bool { return attemptsOf("m1", key) > 1 })
	}
	startMember(t, e.Endpoints, k.Brokers, "m2", handler("m2"))
	moved := ""
	testutil.WaitFor(t, "a key's prelude running on m2", 30*time.Second, func() bool {
		for _, key := range []string{low, high} {
			if attemptsOf("m2", key) > 0 {
				moved = key
				return true
			}
		}
		return false
	})
	before := attemptsOf("m1", moved)
	time.Sleep(time.Second) // retries every 100ms at most
	if after := attemptsOf("m1", moved); after != before {
		t.Errorf("m1 called the handler on %s's parked record %d more times after its range moved to m2 (which runs it)", moved, after-before)
	}
}

// fenceCheckingEndpoint is an HTTP delivery endpoint that checks fences
// as docs/delivery.md asks of a sink: it keeps the newest token seen per
// partition (one range here) and answers "fenced" for an older one; a
// record without a fence it answers "failed", as a sink that cannot
// check it must.
type fenceCheckingEndpoint struct {
	mu     sync.Mutex
	newest map[int32]int64
	done   map[string][]deliveredRecord // by key
	seen   map[string][]*int64          // every fence a key's records came with
}

type deliveredRecord struct {
	offset, token int64
	lo, hi        uint64
}

func (e *fenceCheckingEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Records []struct {
			Partition int32  `json:"partition"`
			Offset    int64  `json:"offset"`
			Key       []byte `json:"key"`
			Range     *struct{ Lo, Hi uint64 }
			Fence     *int64 `json:"fence"`
		} `json:"records"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	var results []string
	for _, rec := range req.Records {
		key := string(rec.Key)
		e.seen[key] = append(e.seen[key], rec.Fence)
		switch {
		case rec.Fence == nil || rec.Range == nil:
			results = append(results, `{"status":"failed","error":"the record has no fence"}`)
		case *rec.Fence < e.newest[rec.Partition]:
			results = append(results, `{"status":"fenced","error":"a newer owner wrote"}`)
		default:
			e.newest[rec.Partition] = *rec.Fence
			e.done[key] = append(e.done[key], deliveredRecord{offset: rec.Offset, token: *rec.Fence, lo: rec.Range.Lo, hi: rec.Range.Hi})
			results = append(results, `{"status":"done"}`)
		}
	}
	fmt.Fprintf(w, `{"results":[%s]}`, strings.Join(results, ","))
}

func (e *fenceCheckingEndpoint) of(key string) ([]deliveredRecord, []*int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.done[key]), slices.Clone(e.seen[key])
}

// TestUnparkDeliversFence: a member delivers to an endpoint that checks
// fences. A key is parked, two of its records parked, and the key
// unparked: the prelude's records reach the endpoint with the fence of
// the range that holds the key (its range, a token no older than the one
// the live records before them carried), so the endpoint takes each once,
// in order.
func TestUnparkDeliversFence(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	ep := &fenceCheckingEndpoint{newest: map[int32]int64{}, done: map[string][]deliveredRecord{}, seen: map[string][]*int64{}}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	d, err := deliver.New(deliver.Config{URL: srv.URL, MemberID: "m1", Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", d.Handler())
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the member at work", 30*time.Second, func() bool { got, _ := ep.of("other"); return len(got) == 1 })
	q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
	if _, err := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: []byte("1"), Partition: 0}, {Key: []byte("k"), Value: []byte("2"), Partition: 0}})
	testutil.WaitFor(t, "k's records parked (the commit past them)", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 3
	})
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, seen := ep.of("k")
		if len(got) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			nulls := 0
			for _, f := range seen {
				if f == nil {
					nulls++
				}
			}
			t.Fatalf("k's parked records not taken by the endpoint in 30s: %d taken, %d deliveries of them, %d with no fence", len(got), len(seen), nulls)
		}
	}
	testutil.WaitFor(t, "the unpark done", 30*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	other, _ := ep.of("other")
	got, _ := ep.of("k")
	h := uint64(ledger.Hash([]byte("k"), 0))
	if len(got) != 2 || got[0].offset != 1 || got[1].offset != 2 {
		t.Fatalf("k's records taken at %v; want offsets 1 and 2, once each, in order", got)
	}
	for _, r := range got {
		if r.token < other[0].token || h < r.lo || h >= r.hi {
			t.Errorf("k's record %d delivered under range [%d, %d) token %d; want the range holding hash %d, token at least %d (the live record's)",
				r.offset, r.lo, r.hi, r.token, h, other[0].token)
		}
	}
}

// TestUnparkPreludeEndsWithLease: a key is unparked with a parked record
// whose handler runs until its context ends. The member's lease is then
// revoked mid-prelude, as etcd does when it expires: the handler's
// context ends, so the old owner no longer runs the record beside the
// range's next owner, and the record runs again under the member's next
// session (a call that began after the first ended).
func TestUnparkPreludeEndsWithLease(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	var mu sync.Mutex
	running, calls, overlapped := 0, 0, false
	firstEnded := make(chan struct{})
	startMember(t, e.Endpoints, k.Brokers, "m1", func(ctx context.Context, m *kafka.Message) error {
		if string(m.Key) != "k" {
			return nil
		}
		mu.Lock()
		calls++
		first := calls == 1
		running++
		overlapped = overlapped || running > 1
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		if !first {
			return nil
		}
		<-ctx.Done()
		close(firstEnded)
		return ctx.Err()
	})
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("other"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "the commit past the first record", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 1
	})
	if _, err := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the member learns of the park
	testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("k"), Value: []byte("v"), Partition: 0}})
	testutil.WaitFor(t, "k's record parked (the commit past it)", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 2
	})
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the prelude's handler running", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == 1
	})
	resp, err := cli.Get(ctx, "/keyshare/g/members/m1")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("m1's registration: %v, %v", resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-firstEnded:
	case <-time.After(10 * time.Second):
		t.Fatal("the prelude's handler runs on 10s after the member's lease was revoked")
	}
	testutil.WaitFor(t, "the unpark done under the next session", 30*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if overlapped || calls < 2 {
		t.Errorf("k's parked record: %d calls, overlapping %v; want it run again after the first call ended, never two at once", calls, overlapped)
	}
}
