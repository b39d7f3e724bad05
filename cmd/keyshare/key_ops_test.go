package main

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

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestKeyOperations: a member in this process (no dead-letter topic) fails
// key-2's first record forever. key skip refuses, with exit status 2 and
// the value named, an offset that is not the head, a missing --offset and
// a key with nothing pending; an unknown group exits 1; key cancel of a
// key with no operation exits 2; none stores anything. A skip without
// --drop is refused by the member, which key describe and status show;
// key cancel deletes it; a skip with --drop drops the record and key-2's
// later records run in order. Then key park: a park into the key's own
// topic is refused, a park creates the parking topic and shows in key
// describe and status, and a second park is refused; key unpark refuses
// a key not parked and unparks key-1; key replay refuses an offset above
// the handled position and replays key-0.
func TestKeyOperations(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	recs := testutil.KeyedRecords(20, 4)
	produced := testutil.Produce(t, k.Brokers, "orders", recs)
	var want []int64
	for i, tp := range produced {
		if string(recs[i].Key) == "key-2" {
			want = append(want, int64(tp.Offset))
		}
	}
	slices.Sort(want)
	head := want[0]
	var mu sync.Mutex
	var handled []int64
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID = "g", []string{"orders"}, "m1"
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3, "fetch.wait.max.ms": 50}
	cfg.SessionTTL, cfg.DrainTimeout, cfg.FlushInterval, cfg.StuckTimeout = 2*time.Second, time.Second, 100*time.Millisecond, time.Second
	cfg.Retry = consumer.RetryPolicy{MaxAttempts: 3, Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}
	cfg.Logger = testutil.Logger(t)
	cfg.Handler = func(_ context.Context, m *kafka.Message) error {
		if string(m.Key) != "key-2" {
			return nil
		}
		if int64(m.TopicPartition.Offset) == head {
			return errors.New("no such customer")
		}
		mu.Lock()
		handled = append(handled, int64(m.TopicPartition.Offset))
		mu.Unlock()
		return nil
	}
	c, err := consumer.New(testutil.NewEtcdClient(t, e.Endpoints), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	conn := []string{"--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g", "--topic", "orders", "--partition", "0"}
	key := func(sub string, args ...string) (string, int) {
		return run(t, 30*time.Second, append(append([]string{"key", sub}, conn...), args...)...)
	}
	testutil.WaitFor(t, "key-2 reported stuck", 30*time.Second, func() bool {
		out, code := key("describe", "key-2")
		return code == 0 && strings.Contains(out, "stuck      at offset")
	})
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"skip", "--offset", fmt.Sprint(head + 4), "key-2"}, 2, fmt.Sprintf("offset %d is not the head of key \"key-2\" of \"orders\"/0: its head is %d", head+4, head)},
		{[]string{"skip", "key-2"}, 2, "--offset -1: want the key's head offset"},
		{[]string{"skip", "--offset", "0", "key-0"}, 2, `key "key-0" of "orders"/0 has no pending record`},
		{[]string{"cancel", "key-2"}, 2, `key "key-2" of "orders"/0 has no operation to cancel`},
	} {
		out, code := key(tc.args[0], tc.args[1:]...)
		if code != tc.code || !strings.Contains(out, tc.want) {
			t.Errorf("key %s: exit %d, output %q; want exit %d naming %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
		}
	}
	out, code := run(t, 30*time.Second, "key", "skip", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "nope", "--topic", "orders", "--offset", "0", "key-2")
	if code != 1 || !strings.Contains(out, `"nope"`) {
		t.Errorf("skip in an unknown group: exit %d, %q; want 1 naming it", code, out)
	}
	if out, _ := key("describe", "key-2"); !strings.Contains(out, "operation  none") {
		t.Fatalf("an operation is stored after refused commands:\n%s", out)
	}

	if out, code := key("skip", "--offset", fmt.Sprint(head), "--reason", "customer deleted", "key-2"); code != 0 || !strings.Contains(out, "skip set") {
		t.Fatalf("skip: exit %d: %s", code, out)
	}
	testutil.WaitFor(t, "the skip refused by m1 (no dead-letter topic)", 20*time.Second, func() bool {
		out, _ = key("describe", "key-2")
		return strings.Contains(out, "REFUSED by m1: no dead-letter topic")
	})
	if !strings.Contains(out, fmt.Sprintf("operation  skip of offset %d (to the dead-letter topic) by", head)) || !strings.Contains(out, `"customer deleted"`) {
		t.Errorf("describe does not show the skip:\n%s", out)
	}
	status, _ := run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g")
	if !strings.Contains(status, fmt.Sprintf("orders/0 key key-2: skip of offset %d", head)) || !strings.Contains(status, "REFUSED by m1") {
		t.Errorf("status does not show the refused skip:\n%s", status)
	}
	js, _ := run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g", "--json")
	var parsed struct {
		KeyOps []keyOpJSON `json:"key_ops"`
	}
	if err := json.Unmarshal([]byte(js), &parsed); err != nil || len(parsed.KeyOps) != 1 {
		t.Errorf("status --json: %v, key_ops %+v; want the skip: %s", err, parsed.KeyOps, js)
	} else if op := parsed.KeyOps[0]; op.Op != "skip" || op.Key != "key-2" || op.Offset != head || !strings.Contains(op.Refused, "m1") {
		t.Errorf("status --json lists %+v, want key-2's refused skip of %d", op, head)
	}
	if out, code := key("cancel", "key-2"); code != 0 || !strings.Contains(out, "cancelled: skip of offset") {
		t.Fatalf("cancel: exit %d: %s", code, out)
	}
	if out, code := key("skip", "--offset", fmt.Sprint(head), "--drop", "key-2"); code != 0 || !strings.Contains(out, "(dropped)") {
		t.Fatalf("skip --drop: exit %d: %s", code, out)
	}
	testutil.WaitFor(t, "key-2's later records handled", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) >= len(want)-1
	})
	mu.Lock()
	if !slices.Equal(handled, want[1:]) {
		t.Errorf("key-2 handled at %v, want %v", handled, want[1:])
	}
	mu.Unlock()
	testutil.WaitFor(t, "the skip deleted", 20*time.Second, func() bool {
		out, _ := key("describe", "key-2")
		return strings.Contains(out, "operation  none") && strings.Contains(out, "pending    none")
	})

	// key park creates the parking topic and shows the park; a second
	// park of the key is refused.
	if out, code := key("park", "--park-topic", "orders", "key-1"); code != 2 || !strings.Contains(out, `parking topic "orders" is the key's own topic`) {
		t.Errorf("park into the key's own topic: exit %d: %s", code, out)
	}
	if out, code := key("park", "--reason", "bad data", "key-1"); code != 0 || !strings.Contains(out, "park set: key \"key-1\" of orders/0, its records copied to orders.keyshare-parked/0 from offset 0 on") {
		t.Fatalf("park: exit %d: %s", code, out)
	}
	if out, _ := key("describe", "key-1"); !strings.Contains(out, "operation  park into orders.keyshare-parked/0 (from offset 0) by") {
		t.Errorf("describe does not show the park:\n%s", out)
	}
	if out, code := key("park", "key-1"); code != 2 || !strings.Contains(out, "already has an operation (park)") {
		t.Errorf("second park: exit %d: %s", code, out)
	}
	status, _ = run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g")
	if !strings.Contains(status, "orders/0 key key-1: park into orders.keyshare-parked/0 (from offset 0) set by") {
		t.Errorf("status does not show the park:\n%s", status)
	}
	if out, code := key("unpark", "key-0"); code != 2 || !strings.Contains(out, `key "key-0" of "orders"/0 is not parked`) {
		t.Errorf("unpark of a key not parked: exit %d: %s", code, out)
	}
	if out, code := key("unpark", "key-1"); code != 0 || !strings.Contains(out, "unpark set: key \"key-1\" of orders/0") {
		t.Fatalf("unpark: exit %d: %s", code, out)
	}
	testutil.WaitFor(t, "the unpark done", 20*time.Second, func() bool {
		out, _ := key("describe", "key-1")
		return strings.Contains(out, "operation  none")
	})

	// key replay refuses an offset above the key's handled position,
	// and replays key-0 from its first record.
	if out, code := key("replay", "--from", "1000", "key-0"); code != 2 || !strings.Contains(out, `offset 1000 is above the handled position of key "key-0" of "orders"/0`) {
		t.Errorf("replay from above the handled position: exit %d: %s", code, out)
	}
	if out, code := key("replay", "key-0"); code != 2 || !strings.Contains(out, "--from -1") {
		t.Errorf("replay without --from: exit %d: %s", code, out)
	}
	if out, code := key("replay", "--from", "0", "key-0"); code != 0 || !strings.Contains(out, "replay set: key \"key-0\" of orders/0 from offset 0") {
		t.Fatalf("replay: exit %d: %s", code, out)
	}
	testutil.WaitFor(t, "the replay done", 20*time.Second, func() bool {
		out, _ := key("describe", "key-0")
		return strings.Contains(out, "operation  none")
	})
}
