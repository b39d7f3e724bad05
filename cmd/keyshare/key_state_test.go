package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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
// delete-state is refused while a member runs and the group is not
// paused. Paused, it deletes the key's state and waits for the owner's
// copy of the tombstone: this member keeps no state, so it never hands it
// back, and the command fails naming it. Run again, it waits for the copy
// instead of deleting again, and reports it once it lands (appended here
// as an owner with state would); a key its handler deleted has nothing to
// wait for. With the member stopped it deletes
// without waiting (describe shows the key deleted), and refuses a key
// without state.
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
	if out, code := run(t, 30*time.Second, append(del, "--wait", "0s", "key-3")...); code != 2 || !strings.Contains(out, "--wait 0s: want a duration above 0") {
		t.Errorf("delete-state --wait 0s: exit %d:\n%s", code, out)
	}
	if out, code := run(t, 30*time.Second, append(del, "key-3")...); code != 1 || !strings.Contains(out, "group g has live members (m1) and is not paused: pause it first: keyshare group pause --group g") {
		t.Errorf("delete-state with a live member, not paused: exit %d:\n%s", code, out)
	}
	if out, code := run(t, 30*time.Second, "group", "pause", "--etcd", e.Endpoints[0], "--group", "g"); code != 0 {
		t.Fatalf("group pause: exit %d:\n%s", code, out)
	}
	out, code = run(t, 30*time.Second, append(del, "--wait", "1s", "key-3")...)
	if code != 1 || !strings.Contains(out, "the tombstone at offset 5 of g-orders-state/0 is appended, but the key's owner m1 did not hand it back within --wait 1s") ||
		!strings.Contains(out, "restart m1 (its restore reads the deletion), or run this again with a longer --wait") {
		t.Fatalf("delete-state with the group paused and an owner that keeps no state: exit %d:\n%s", code, out)
	}
	if out, code := run(t, 30*time.Second, append(del, "--wait", "20s", "key-9")...); code != 1 || !strings.Contains(out, `key "key-9" has no state in g-orders-state/0: it was deleted at applied offset 8, token 9; nothing to delete`) {
		t.Errorf("delete-state of a key its handler deleted, the group paused: exit %d:\n%s", code, out)
	}
	again := make(chan string, 1)
	go func() {
		out, code := run(t, 30*time.Second, append(del, "--wait", "20s", "key-3")...)
		again <- fmt.Sprintf("exit %d:\n%s", code, out)
	}()
	time.Sleep(time.Second)
	appendChanges(t, k.Brokers, statestore.DefaultChangelog("g", "orders"), []keystate.Entry{{Key: []byte("key-3"), Deleted: true, Applied: 7, Fence: 12}})
	if out := <-again; !strings.HasPrefix(out, "exit 0:") || !strings.Contains(out, `the state of key "key-3" in g-orders-state/0 was deleted already, at applied offset 7; its owner m1`) ||
		!strings.Contains(out, "holds the deletion") || !strings.Contains(out, "token 12") {
		t.Errorf("delete-state run again, the owner's copy landing: %s", out)
	}

	stop()
	appendChanges(t, k.Brokers, statestore.DefaultChangelog("g", "orders"), []keystate.Entry{{Key: []byte("key-4"), Value: []byte("y"), Applied: 3, Fence: 9}})
	out, code = run(t, 30*time.Second, append(del, "key-4")...)
	if code != 0 || !strings.Contains(out, `deleted the state of key "key-4" in g-orders-state/0: 1 bytes, applied offset 3 (the tombstone at offset 8); no live member owns its range`) {
		t.Fatalf("delete-state with the member stopped: exit %d:\n%s", code, out)
	}
	if out, _ = run(t, 30*time.Second, append(conn, "key-4")...); !strings.Contains(out, "state      deleted by the record at offset 3, token 9") {
		t.Errorf("key-4's description after delete-state does not show it deleted:\n%s", out)
	}
	if out, code = run(t, 30*time.Second, append(del, "key-3")...); code != 1 || !strings.Contains(out, `key "key-3" has no state in g-orders-state/0: it was deleted at applied offset 7, token 12; nothing to delete`) {
		t.Errorf("delete-state of a deleted key with the member stopped: exit %d:\n%s", code, out)
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
