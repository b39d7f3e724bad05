package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/statestore"
	"github.com/keyshare/keyshare/testutil"
)

// TestKeyDescribeState: key describe --state reads a key's state from the
// group's changelog by the restore rule: the change with the highest
// applied offset wins over a late change behind it; a tombstone shows as
// deleted; a key without changes has none. --json says the same. key
// delete-state is refused while a member runs, then deletes the key's
// state (describe shows it deleted), and refuses a key without state.
func TestKeyDescribeState(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, statestore.DefaultChangelog("g", "orders"): 1})
	member := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "m1", "--ttl", "2s")
	member.Env = flagFreeEnv()
	var mout bytes.Buffer
	member.Stdout, member.Stderr = &mout, &mout
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			_ = member.Process.Signal(os.Interrupt)
			_ = member.Wait()
		})
	}
	t.Cleanup(stop)
	appendChanges(t, k.Brokers, statestore.DefaultChangelog("g", "orders"), []keystate.Entry{
		{Key: []byte("key-3"), Value: []byte("count=1"), Applied: 4, Fence: 9},
		{Key: []byte("key-3"), Value: []byte("count=2"), Applied: 7, Fence: 9},
		{Key: []byte("key-3"), Value: []byte("stale"), Applied: 5, Fence: 3}, // late, behind
		{Key: []byte("key-9"), Value: []byte("x"), Applied: 2, Fence: 9},
		{Key: []byte("key-9"), Deleted: true, Applied: 8, Fence: 9},
	})
	conn := []string{"key", "describe", "--state", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g", "--topic", "orders", "--partition", "0"}
	var out string
	var code int
	testutil.WaitFor(t, "the group known in etcd", 30*time.Second, func() bool {
		out, code = run(t, 30*time.Second, append(conn, "key-3")...)
		return code == 0
	})
	for _, line := range []string{"state      7 bytes, applied offset 7, token 9 (changelog g-orders-state/0, read to offset 5)", `value      "count=2"`} {
		if !strings.Contains(out, line) {
			t.Errorf("key-3's description lacks %q:\n%s", line, out)
		}
	}
	if out, _ = run(t, 30*time.Second, append(conn, "key-9")...); !strings.Contains(out, "state      deleted by the record at offset 8, token 9") {
		t.Errorf("key-9's description does not show it deleted:\n%s", out)
	}
	if out, _ = run(t, 30*time.Second, append(conn, "key-5")...); !strings.Contains(out, "state      none (changelog g-orders-state/0") {
		t.Errorf("key-5's description does not show it without state:\n%s", out)
	}
	out, code = run(t, 30*time.Second, append(conn, "--json", "key-3")...)
	var j struct {
		State *struct {
			Found   bool   `json:"found"`
			Size    int    `json:"size"`
			Value   string `json:"value"`
			Applied *int64 `json:"applied"`
			Fence   *int64 `json:"fence"`
		} `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, out)
	}
	if s := j.State; s == nil || !s.Found || s.Size != 7 || s.Value != "count=2" || s.Applied == nil || *s.Applied != 7 || s.Fence == nil || *s.Fence != 9 {
		t.Errorf("--json does not give key-3's state:\n%s", out)
	}

	del := []string{"key", "delete-state", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g", "--topic", "orders", "--partition", "0"}
	if out, code := run(t, 30*time.Second, append(del, "key-3")...); code != 1 || !strings.Contains(out, "group g has live members (m1): stop them first") {
		t.Errorf("delete-state with a live member: exit %d:\n%s", code, out)
	}
	stop()
	out, code = run(t, 30*time.Second, append(del, "key-3")...)
	if code != 0 || !strings.Contains(out, `deleted the state of key "key-3" in g-orders-state/0: 7 bytes, applied offset 7`) {
		t.Fatalf("delete-state: exit %d:\n%s", code, out)
	}
	if out, _ = run(t, 30*time.Second, append(conn, "key-3")...); !strings.Contains(out, "state      deleted by the record at offset 7, token ") {
		t.Errorf("key-3's description after delete-state does not show it deleted:\n%s", out)
	}
	if out, code = run(t, 30*time.Second, append(del, "key-5")...); code != 1 || !strings.Contains(out, `key "key-5" has no state in g-orders-state/0: nothing to delete`) {
		t.Errorf("delete-state of a key without state: exit %d:\n%s", code, out)
	}
}

// appendChanges writes entries to partition 0 of changelog, as members do.
func appendChanges(t *testing.T, brokers, changelog string, entries []keystate.Entry) {
	t.Helper()
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3, "enable.idempotence": true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, e := range entries {
		m := statestore.EntryMessage(changelog, 0, e)
		report := make(chan kafka.Event, 1)
		if err := p.Produce(m, report); err != nil {
			t.Fatal(err)
		}
		if d := (<-report).(*kafka.Message); d.TopicPartition.Error != nil {
			t.Fatal(d.TopicPartition.Error)
		}
	}
}
