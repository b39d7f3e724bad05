package kit_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestMemberTokenAndDeadline: a member with --deliver-token-file and
// --deliver-timeout 500ms delivers one key's 20 records in batches of 4 to
// the kit's @endpoint with the token configured (testdata/deadline_endpoint.py).
// The first record takes 800 ms on its first attempt, past its request's
// deadline: the kit must apply none of the request's later records then
// (it answers 504), and the member sends the request again as attempt 2
// once the deadline and its grace have passed. Every record is applied,
// in offset order, and none after its request's deadline but the slow
// one itself.
func TestMemberTokenAndDeadline(t *testing.T) {
	bin := keyshareBin(t)
	dir := t.TempDir()
	tokenFile, log := filepath.Join(dir, "token"), filepath.Join(dir, "applied.jsonl")
	if err := os.WriteFile(tokenFile, []byte("s3cret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", filepath.Join(kitDir, "src"))
	ep := startPy(t, "python3", filepath.Join(kitDir, "testdata", "deadline_endpoint.py"),
		"--log", log, "--token-file", tokenFile, "--slow-offset", "0", "--slow-seconds", "0.8")
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{topic: 1})
	const n = 20
	testutil.Produce(t, k.Brokers, topic, testutil.KeyedRecords(n, 1))
	cmd := exec.Command(bin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", group, "--topic", topic,
		"--id", "a", "--deliver", "http://"+ep.addr+"/", "--deliver-token-file", tokenFile, "--deliver-timeout", "500ms",
		"--batch-size", "4", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	testutil.WaitFor(t, "the commit past every record", 60*time.Second, func() bool {
		c, err := testutil.ReadCommitted(k.Brokers, group, topic, 1)
		return err == nil && c[0] == n
	})

	type applied struct {
		Offset   int64
		Attempt  int
		At       float64
		Deadline *float64
	}
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []applied
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var a applied
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		got = append(got, a)
	}
	next, resent := int64(0), 0
	for _, a := range got {
		if a.Deadline == nil {
			t.Fatalf("record %d came without a deadline: the member sent no Keyshare-Deadline", a.Offset)
		}
		if a.At > *a.Deadline && !(a.Offset == 0 && a.Attempt == 1) {
			t.Errorf("record %d (attempt %d) applied %.3f s after its request's deadline", a.Offset, a.Attempt, a.At-*a.Deadline)
		}
		switch {
		case a.Offset == next:
			next++
		case a.Offset < next:
			resent++ // the slow record, applied before its deadline passed, sent again with the rest
		default:
			t.Errorf("record %d applied before record %d", a.Offset, next)
		}
		if a.Attempt > 1 {
			resent++
		}
	}
	if next != n {
		t.Errorf("records 0..%d applied in order, want all %d", next-1, n)
	}
	if resent == 0 {
		t.Error("no record sent again: the slow request was answered as done, not 504")
	}
}
