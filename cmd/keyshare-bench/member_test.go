package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/cmd/internal/recordlog"
	"github.com/keyshare/keyshare/testutil"
)

// bin is this command, built once: the tests run keyshare-bench member as
// a process.
var bin string

func TestMain(m *testing.M) {
	var cleanup func()
	var err error
	bin, cleanup, err = testutil.BuildCommand(".", "keyshare-bench", false)
	if err != nil {
		panic(err)
	}
	code := testutil.RunTests(m)
	cleanup()
	os.Exit(code)
}

// run runs keyshare-bench and returns its output and exit code.
func run(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), code
}

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

// TestBenchMemberRefusesBadFlags: keyshare-bench member checks keyshare
// member's flags and the lab's, before any network; --deliver replaces
// the simulated handler, so its flags beside --deliver are refused.
func TestBenchMemberRefusesBadFlags(t *testing.T) {
	base := []string{"member", "--group", "g", "--topic", "t", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--batch-size", "-1"}, "--batch-size -1: want 0"},
		{[]string{"--batch-size", "5000"}, "--batch-size 5000 exceeds --max-in-flight 1000"},
		{[]string{"--batch-size", "10", "--batch-wait", "-1s"}, "--batch-wait -1s"},
		{[]string{"--work", "call:5ms"}, "want call:FIXED+PER_RECORD"},
		{[]string{"--work", "fast"}, `--work "fast": want a duration`},
		{[]string{"--fail-rate", "2"}, "--fail-rate 2: want a probability between 0 and 1"},
		{[]string{"--stall", "key-3"}, `--stall "key-3": want KEY:DURATION`},
		{[]string{"--deliver", "http://sink/", "--work", "5ms"}, "--work simulates a handler; --deliver replaces it"},
		{[]string{"--deliver", "http://sink/", "--record", "x"}, "--record simulates a handler"},
		{[]string{"--max-in-flight", "-3"}, "--max-in-flight -3 must be at least --concurrency 16"},
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
	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(1000, 20))
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
		var h recordlog.Line
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
