package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// bin is the keyshare binary, built once for all tests of this package;
// benchBin is keyshare-bench, whose member (keyshare member with simulated
// work and a record log) the tests of the other commands run when they
// need members that handle records.
var bin, benchBin string

// deliverNowhere is the --deliver of a product member that is not meant to
// hand any record over: nothing listens there.
var deliverNowhere = []string{"--deliver", "http://127.0.0.1:1/"}

func TestMain(m *testing.M) {
	// The two builds run at once: each is a link of its own, and CI's
	// time is short.
	var cleanup, benchCleanup func()
	var err, benchErr error
	built := make(chan struct{})
	go func() {
		defer close(built)
		benchBin, benchCleanup, benchErr = testutil.BuildCommand("../keyshare-bench", "keyshare-bench", raceEnabled)
	}()
	bin, cleanup, err = testutil.BuildKeyshare(".", raceEnabled)
	<-built
	if err != nil || benchErr != nil {
		if err == nil {
			cleanup()
		}
		if benchErr == nil {
			benchCleanup()
		}
		panic(errors.Join(err, benchErr))
	}
	code := testutil.RunTests(m)
	cleanup()
	benchCleanup()
	os.Exit(code)
}

// run runs the binary and returns its output and exit code.
func run(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	return runBinary(t, bin, timeout, args...)
}

// runBench is run with keyshare-bench.
func runBench(t *testing.T, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	return runBinary(t, benchBin, timeout, args...)
}

func runBinary(t *testing.T, bin string, timeout time.Duration, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = flagFreeEnv()
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

func TestDemoVerifiesGuarantees(t *testing.T) {
	args := []string{"demo", "--duration", "6s", "--records", "3000", "--keys", "100", "--work", "1ms"}
	if testutil.KafkaBackend() == testutil.BackendApache {
		args = append(args, "--kafka", "apache") // its own broker, beside the tests' shared one
	}
	out, code := run(t, 3*time.Minute, args...)
	t.Log(out)
	if code != 0 {
		t.Fatalf("demo exited %d", code)
	}
	for _, want := range []string{"lost               0", "order violations   0", "committed == end   true", "SIGKILL member m2", "all guarantees held",
		"started member m1 (pid"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	// Every member delivers over HTTP to the demo's endpoint, which
	// applied every record (some twice, after the SIGKILL), none out of
	// its key's order.
	if !regexp.MustCompile(`members deliver each record over HTTP to the demo's endpoint http://127\.0\.0\.1:\d+/`).MatchString(out) {
		t.Errorf("demo output does not say where the members deliver")
	}
	// In plain text too (this output is a pipe), the demo shows a moment
	// when one partition is shared by several members, with their ranges,
	// and says where each member's metrics are served.
	if !regexp.MustCompile(`partition demo-orders/\d is shared: m\d+ \[\d+,\d+\) \(\d+%\), m\d+ \[\d+,\d+\)`).MatchString(out) {
		t.Errorf("demo output never shows a partition shared by members with their ranges")
	}
	if !regexp.MustCompile(`started member m1 \(pid \d+\), metrics at http://127\.0\.0\.1:\d+/metrics`).MatchString(out) {
		t.Errorf("demo output does not say where a member's metrics are")
	}
	if strings.Contains(out, "(gone)") && !strings.Contains(out, "m2 (gone)") {
		t.Errorf("the final table shows a member that left gracefully as gone")
	}
	m := regexp.MustCompile(`over HTTP +endpoint applied (\d+) records of 100 keys \(\d+ sent again, 0 out of key order\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("demo output does not show the endpoint's summary")
	}
	if n, _ := strconv.Atoi(m[1]); n < 3000 {
		t.Errorf("the endpoint applied %d records, want all 3000 (and any sent again)", n)
	}
}

func TestProduceMemberStatusEndToEnd(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 2})
	out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "500", "--keys", "20", "--quiet")
	if code != 0 || !strings.Contains(out, "produced 500 records") {
		t.Fatalf("produce: exit %d: %s", code, out)
	}
	rec := filepath.Join(t.TempDir(), "m.jsonl")
	member := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "solo", "--record", rec, "--ttl", "2s")
	var mout bytes.Buffer
	member.Stdout, member.Stderr = &mout, &mout
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	cancel := func() { _ = member.Process.Signal(os.Interrupt) }
	t.Cleanup(func() { _ = member.Process.Kill() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(rec)
		if bytes.Count(b, []byte("\n")) >= 500 {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			_ = member.Wait()
			t.Fatalf("member handled %d of 500 records; its log:\n%s", bytes.Count(b, []byte("\n")), mout.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var status string
	for time.Now().Before(deadline) {
		status, code = run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g")
		if code == 0 && strings.Count(status, " 0\n") >= 2 && strings.Contains(status, "leader solo") {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Log(status)
	if !strings.Contains(status, "leader solo") || !strings.Contains(status, "orders/0") || !strings.Contains(status, "orders/1") {
		t.Fatalf("status does not show the leader and both partitions:\n%s", status)
	}
	js, code := run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--group", "g", "--json")
	if code != 0 || !strings.Contains(js, `"leader": "solo"`) {
		t.Fatalf("status --json: exit %d: %s", code, js)
	}
	cancel()
	if err := member.Wait(); err != nil {
		t.Fatalf("member did not leave cleanly on SIGINT: %v\n%s", err, mout.String())
	}
}

func TestBadInput(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"member", "--bogus"}, 2, "unknown flag --bogus: run 'keyshare member -h' for the flags"},
		{[]string{"member", "--group", "g", "--topic", "t", "--work", "fast"}, 2, "--work is not a flag of keyshare member"},
		{[]string{"member", "--group", "g", "--topic", "t"}, 2, "--deliver URL is required"},
		{[]string{"produce", "--topic", "t", "--zipf", "0.5"}, 2, "exponent must be greater than 1"},
		{[]string{"member", "--group", "g", "--topic", "t", "--balance", "hash"}, 2, `--balance "hash": want "load" or "width"`},
		{[]string{"member", "--group", "g", "--topic", "t", "--load-report-interval", "10ms"}, 2, "--load-report-interval 10ms: want at least 100ms"},
		{[]string{"member", "--group", "g", "--topic", "t", "--max-txn-ops", "7"}, 2, "--max-txn-ops 7: want at least 8, the etcd server's --max-txn-ops (default 128)"},
		{[]string{"cluster", "--topic", "orders"}, 2, "want NAME:PARTITIONS"},
		{[]string{"demo", "--kafka", "confluent"}, 2, `--kafka "confluent": want kfake or apache`},
		{[]string{"status"}, 2, "--group is required"},
		// Brokers that do not answer: the member keeps trying (they may be
		// starting); etcd that does not answer ends the start.
		{[]string{"member", "--group", "g", "--topic", "t", "--etcd", "127.0.0.1:1", "--brokers", "127.0.0.1:1", "--deliver", "http://127.0.0.1:1/"}, 1, "etcd at 127.0.0.1:1 did not answer"},
		{[]string{"produce", "--brokers", "127.0.0.1:1", "--topic", "t"}, 1, "check --brokers"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			// Each case is a process of its own with nothing to share;
			// the unreachable ones wait out the command's connect
			// timeout, so they wait side by side.
			t.Parallel()
			out, code := run(t, time.Minute, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (want %d), output:\n%s\nwant it to contain %q", code, tc.code, out, tc.want)
			}
		})
	}
	t.Run("missing topic", func(t *testing.T) {
		k := testutil.StartKafka(t, map[string]int32{"orders": 1})
		out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "missing")
		if code != 1 || !strings.Contains(out, `topic "missing" does not exist`) {
			t.Fatalf("exit %d: %s", code, out)
		}
	})
	t.Run("apache without java", func(t *testing.T) {
		// The bundled cluster on Apache Kafka needs java: without it on
		// PATH, one clear error at once.
		cmd := exec.Command(bin, "cluster", "--kafka", "apache", "--topic", "orders:1", "--etcd-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0")
		cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "java not found on PATH: install a JDK or JRE 17+") {
			t.Fatalf("%v: %s", err, out)
		}
	})
	t.Run("port in use", func(t *testing.T) {
		_, e := testutil.StartEtcd(t)
		addr := strings.TrimPrefix(e.Endpoints[0], "http://")
		out, code := run(t, time.Minute, "cluster", "--etcd-addr", addr, "--kafka-addr", "127.0.0.1:0")
		if code != 1 || !strings.Contains(out, "port in use") {
			t.Fatalf("exit %d: %s", code, out)
		}
	})
}

// flagFreeEnv is the test's environment without KEYSHARE_* variables,
// which set the binary's flags: the Apache tier's KEYSHARE_KAFKA=apache
// would otherwise give every cluster and demo a JVM of its own. A test
// that wants a flag passes it.
func flagFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KEYSHARE_") {
			env = append(env, kv)
		}
	}
	return env
}

// freePort returns a host:port that was free a moment ago
// (testutil.FreeAddr).
func freePort(t *testing.T) string { return testutil.FreeAddr(t) }

// TestStatusExplainsStuckKey: a member whose key-3 stalls reports it; status
// names the record that holds the partition and splits the lag; the member's
// metrics endpoint counts the stuck range.
func TestStatusExplainsStuckKey(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	if out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "300", "--keys", "20", "--quiet"); code != 0 {
		t.Fatalf("produce: %s", out)
	}
	metrics := freePort(t)
	member := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
		"--id", "solo", "--stall", "key-3:60s", "--stuck-timeout", "1s", "--drain-timeout", "2s", "--ttl", "2s", "--metrics-addr", metrics)
	var mout bytes.Buffer
	member.Stdout, member.Stderr = &mout, &mout
	if err := member.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = member.Process.Kill(); _ = member.Wait() })

	var status string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		status, _ = run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g")
		if strings.Contains(status, "by key key-3") && strings.Contains(status, "held back by the unfinished record") {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Log(status)
	if !strings.Contains(status, "orders/0 held at") || !strings.Contains(status, "by key key-3") {
		t.Fatalf("status does not name the stuck record:\n%s\nmember log:\n%s", status, mout.String())
	}
	if !strings.Contains(status, "held back by the unfinished record at offset") {
		t.Fatalf("status does not explain the lag:\n%s", status)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "\nkeyshare_stuck_ranges{group=\"g\"} 1\n") {
		t.Fatalf("metrics do not count the stuck range:\n%s", body)
	}
	_ = member.Process.Signal(os.Interrupt)
	if err := member.Wait(); err != nil {
		t.Fatalf("member did not leave cleanly: %v\n%s", err, mout.String())
	}
}

// TestStatusReportsRetentionLoss: a member leaves with key-3's records
// unfinished, Kafka deletes them, and the next member reports the loss;
// status prints it (table and JSON) and the committed offset reaches the
// end.
func TestStatusReportsRetentionLoss(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	if out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "300", "--keys", "20", "--quiet"); code != 0 {
		t.Fatalf("produce: %s", out)
	}
	start := func(id string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
		args := append([]string{"member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
			"--id", id, "--drain-timeout", "1s", "--ttl", "2s"}, extra...)
		cmd := exec.Command(benchBin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, &out
	}
	status := func(args ...string) string {
		out, _ := run(t, 30*time.Second, append([]string{"status", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g"}, args...)...)
		return out
	}
	a, aout := start("a", "--stall", "key-3:60s", "--stuck-timeout", "1s")
	testutil.WaitFor(t, "a holds key-3", 60*time.Second, func() bool {
		st := status()
		return strings.Contains(st, "by key key-3") && strings.Contains(st, "held back by the unfinished record")
	})
	_ = a.Process.Signal(os.Interrupt)
	if err := a.Wait(); err != nil {
		t.Fatalf("a did not leave cleanly: %v\n%s", err, aout)
	}
	if err := k.DeleteRecords("orders", 0, 200); err != nil {
		t.Fatal(err)
	}
	start("b")
	var table string
	testutil.WaitFor(t, "the loss reported and the commit at the end", 60*time.Second, func() bool {
		table = status()
		return strings.Contains(table, "lost to retention") && testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 300
	})
	t.Log(table)
	if !strings.Contains(table, "orders/0 lost to retention in range [0,4294967296): records from offset ") ||
		!strings.Contains(table, " up to the log start 200 (") || !strings.Contains(table, "found by b") {
		t.Fatalf("status does not describe the loss:\n%s", table)
	}
	var js struct {
		Losses []struct {
			Member   string `json:"member"`
			LogStart int64  `json:"log_start"`
			Segments []struct {
				Pending []int64 `json:"pending"`
			} `json:"segments"`
		} `json:"lost_to_retention"`
	}
	if err := json.Unmarshal([]byte(status("--json")), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Losses) != 1 || js.Losses[0].Member != "b" || js.Losses[0].LogStart != 200 || len(js.Losses[0].Segments) != 1 {
		t.Fatalf("status --json losses = %+v", js.Losses)
	}
	// key-3's records below 200 were pending when a left: all of them, and
	// only them, are named.
	pending := js.Losses[0].Segments[0].Pending
	if len(pending) == 0 || pending[len(pending)-1] >= 200 || !strings.Contains(table, fmt.Sprintf("(%d known pending)", len(pending))) {
		t.Fatalf("pending offsets lost %v; status:\n%s", pending, table)
	}
}
