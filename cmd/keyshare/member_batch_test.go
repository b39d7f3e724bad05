package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

func TestParseCost(t *testing.T) {
	for _, tc := range []struct {
		spec string
		n    int
		want time.Duration
	}{
		{"call:5ms+0.05ms", 1, 5050 * time.Microsecond},
		{"call:5ms+0.05ms", 100, 10 * time.Millisecond},
		{"call:0s+1ms", 3, 3 * time.Millisecond},
		{"2ms", 3, 6 * time.Millisecond}, // a per-record cost, summed
		{"0", 10, 0},
	} {
		f, err := parseCost(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		if got := f(nil, tc.n); got != tc.want {
			t.Errorf("%s with %d records: %s, want %s", tc.spec, tc.n, got, tc.want)
		}
	}
	for _, bad := range []string{"call:5ms", "call:5ms+", "call:x+1ms", "call:-1ms+1ms", "call:"} {
		if _, err := parseCost(bad); err == nil || !strings.Contains(err.Error(), "call:FIXED+PER_RECORD") {
			t.Errorf("%s: error %v, want one naming call:FIXED+PER_RECORD", bad, err)
		}
	}
}

func TestMemberBatchFlagsRefused(t *testing.T) {
	base := []string{"member", "--group", "g", "--topic", "t"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch-size", "-1"}, "--batch-size -1: want 0"},
		{[]string{"--batch-size", "5000"}, "--batch-size 5000 exceeds --max-in-flight 1000"},
		{[]string{"--batch-size", "10", "--batch-wait", "-1s"}, "--batch-wait -1s"},
		{[]string{"--work", "call:5ms"}, "want call:FIXED+PER_RECORD"},
	} {
		out, code := run(t, time.Minute, append(base, tc.args...)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d (want 2), output:\n%s\nwant it to contain %q", tc.args, code, out, tc.want)
		}
	}
}

// TestMemberBatchEndToEnd: a member with --batch-size and a per-call cost
// handles every record once, each key in order, with 10% of attempts
// failing (retried, the key's later records waiting for them).
func TestMemberBatchEndToEnd(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 2})
	if out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "1000", "--keys", "20", "--quiet"); code != 0 {
		t.Fatalf("produce: exit %d: %s", code, out)
	}
	rec := filepath.Join(t.TempDir(), "m.jsonl")
	member := exec.Command(bin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
		"--id", "solo", "--record", rec, "--ttl", "2s", "--batch-size", "50", "--batch-wait", "5ms", "--work", "call:2ms+0.02ms", "--fail-rate", "0.1")
	var mout bytes.Buffer
	member.Stdout, member.Stderr = &mout, &mout
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = member.Process.Kill() })
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, _ := os.ReadFile(rec)
		if bytes.Count(b, []byte("\n")) >= 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member handled %d of 1000 records; its log:\n%s", bytes.Count(b, []byte("\n")), mout.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = member.Process.Signal(os.Interrupt)
	if err := member.Wait(); err != nil {
		t.Fatalf("member did not leave cleanly: %v\n%s", err, mout.String())
	}
	f, err := os.Open(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]bool{}
	last := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var h handledRecord
		if err := json.Unmarshal(sc.Bytes(), &h); err != nil {
			t.Fatal(err)
		}
		id := h.Topic + "/" + strconv.Itoa(int(h.Partition)) + "/" + strconv.FormatInt(h.Offset, 10)
		if seen[id] {
			t.Errorf("%s handled twice", id)
		}
		seen[id] = true
		key := h.Topic + "/" + strconv.Itoa(int(h.Partition)) + "/" + h.Key
		if prev, ok := last[key]; ok && int(h.Offset) < prev {
			t.Errorf("key %s: offset %d after %d", key, h.Offset, prev)
		}
		last[key] = int(h.Offset)
	}
	if len(seen) != 1000 {
		t.Fatalf("%d distinct records handled, want 1000", len(seen))
	}
}
