package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/testutil"
)

// TestGroupResetAndDelete runs keyshare group as an operator would: bad
// input and a reset while a member runs are refused naming the value, with
// nothing changed; a dry run changes nothing; --to-earliest --execute moves
// etcd and Kafka together, so the next member handles every record again;
// delete --kafka-offsets removes both.
func TestGroupResetAndDelete(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 2})
	if out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "100", "--keys", "10", "--quiet"); code != 0 {
		t.Fatalf("produce: %s", out)
	}
	conn := []string{"--etcd", e.Endpoints[0], "--brokers", k.Brokers}
	startMember := func(rec string) *exec.Cmd {
		m := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "m1", "--ttl", "2s", "--record", rec)
		var out bytes.Buffer
		m.Stdout, m.Stderr = &out, &out
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
		return m
	}
	committed := func() int64 {
		c := testutil.Committed(t, k.Brokers, "g", "orders", 2)
		return c[0] + c[1]
	}
	lines := func(p string) int {
		b, _ := os.ReadFile(p)
		return bytes.Count(b, []byte("\n"))
	}
	rec1 := filepath.Join(t.TempDir(), "1.jsonl")
	m := startMember(rec1)
	testutil.WaitFor(t, "the first pass to commit all 100", 60*time.Second, func() bool { return committed() == 100 })

	rev := func() int64 {
		r, err := cli.Get(t.Context(), "/keyshare/g/ledger/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var max int64
		for _, kv := range r.Kvs {
			max = maxInt(max, kv.ModRevision)
		}
		r2, _ := cli.Get(t.Context(), "/keyshare/g/commits/", clientv3.WithPrefix())
		for _, kv := range r2.Kvs {
			max = maxInt(max, kv.ModRevision)
		}
		return max
	}
	group := func(args ...string) (string, int) {
		return run(t, time.Minute, append(append([]string{"group"}, args...), conn...)...)
	}
	// While m1 runs.
	out, code := group("reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest", "--execute")
	if code != 1 || !strings.Contains(out, `group "g" has live members: m1 and is not paused (pause it first: keyshare group pause --group g, or stop them)`) {
		t.Fatalf("reset while live: exit %d:\n%s", code, out)
	}
	out, code = group("delete", "--group", "g")
	if code != 1 || !strings.Contains(out, `group "g" has live members: m1 (stop them first`) {
		t.Fatalf("delete while live: exit %d:\n%s", code, out)
	}
	out, code = group("describe", "--group", "g")
	if code != 0 || !strings.Contains(out, "leader m1") || !strings.Contains(out, "orders/1") {
		t.Fatalf("describe: exit %d:\n%s", code, out)
	}
	if out, code := group("list"); code != 0 || !regexp.MustCompile(`(?m)^g\s+Stable\s+1$`).MatchString(out) {
		t.Fatalf("list while m1 runs: exit %d:\n%s", code, out)
	}
	out, code = group("describe", "--group", "g", "--json")
	var desc struct {
		State   string `json:"state"`
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &desc) != nil || desc.State != "Stable" || len(desc.Members) != 1 || desc.Members[0].ID != "m1" || strings.Contains(out, "CreateRev") {
		t.Fatalf("describe --json: exit %d:\n%s", code, out)
	}
	_ = m.Process.Signal(os.Interrupt)
	_ = m.Wait()
	if out, code := group("list"); code != 0 || !regexp.MustCompile(`(?m)^g\s+Empty\s+0$`).MatchString(out) {
		t.Fatalf("list after m1 left: exit %d:\n%s", code, out)
	}
	before := rev()

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"reset-offsets", "--group", "nope", "--topic", "orders", "--to-earliest"}, 1, `unknown group "nope"`},
		{[]string{"reset-offsets", "--group", "g", "--topic", "missing", "--to-earliest"}, 1, `topic "missing" does not exist`},
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders:7", "--to-earliest"}, 1, `topic "orders" has partitions 0-1, not 7`},
		// Out of the log: clamped to its bounds, as Kafka clamps (dry runs).
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders:0,1", "--to-offset", "100000"}, 0, "100000 is past the log end: clamped"},
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders", "--shift-by", "-1000"}, 0, "is before the log start: clamped"},
		{[]string{"reset-offsets", "--group", "g", "--all-topics", "--to-datetime", time.Now().Add(-time.Hour).Format("2006-01-02T15:04:05")}, 0, "target time: "},
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders", "--to-datetime", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "--execute"}, 1, "is in the future"},
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders", "--to-datetime", "yesterday"}, 2, `--to-datetime "yesterday": want YYYY-MM-DDTHH:mm:SS[.sss][zone]`},
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders", "--by-duration", "1h"}, 2, `--by-duration "1h": want an ISO-8601 duration PnDTnHnMnS`},
		{[]string{"reset-offsets", "--group", "g", "--from-file", "/nonexistent.csv"}, 2, "--from-file: open /nonexistent.csv"},
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest", "--to-latest"}, 2, "give exactly one of"},
		{[]string{"reset-offsets", "--group", "g", "--to-earliest"}, 2, "say which partitions: --topic T, T:P or T:P,P,..., or --all-topics"},
		{[]string{"reset-offsets", "--group", "g", "--topic", "orders:x", "--to-earliest"}, 2, `--topic "orders:x"`},
		{[]string{"delete", "--group", "nope"}, 1, `unknown group "nope"`},
		{[]string{"frob", "--group", "g"}, 2, `unknown group subcommand "frob"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, code := group(tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (want %d), output:\n%s\nwant it to contain %q", code, tc.code, out, tc.want)
			}
		})
	}
	// Dry run: the plan, and nothing changed.
	out, code = group("reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest")
	t.Log(out)
	if code != 0 || !strings.Contains(out, "dry run: nothing changed") || !strings.Contains(out, "orders  0") {
		t.Fatalf("dry run: exit %d:\n%s", code, out)
	}
	if rev() != before || committed() != 100 {
		t.Fatalf("bad input or the dry run changed etcd (revision %d → %d) or Kafka (committed %d)", before, rev(), committed())
	}
	out, code = group("reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest", "--execute")
	if code != 0 || !strings.Contains(out, "reset 2 partitions of group g") {
		t.Fatalf("execute: exit %d:\n%s", code, out)
	}
	if c := committed(); c != 0 {
		t.Fatalf("Kafka committed offsets sum to %d after --to-earliest, want 0", c)
	}
	// --export writes the plan as Kafka's CSV; --from-file applies it.
	exp := exec.Command(bin, append([]string{"group", "reset-offsets", "--group", "g", "--all-topics", "--to-latest", "--export"}, conn...)...)
	csv, err := exp.Output()
	if err != nil || !regexp.MustCompile(`^orders,0,\d+\norders,1,\d+\n$`).Match(csv) {
		t.Fatalf("--export: %v, stdout:\n%s", err, csv)
	}
	planFile := filepath.Join(t.TempDir(), "plan.csv")
	if err := os.WriteFile(planFile, csv, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := group("reset-offsets", "--group", "g", "--from-file", planFile, "--execute"); code != 0 || committed() != 100 {
		t.Fatalf("--from-file: exit %d, committed %d, want 100:\n%s", code, committed(), out)
	}
	if out, code := group("reset-offsets", "--group", "g", "--topic", "orders:0,1", "--to-current", "--execute"); code != 0 || committed() != 100 {
		t.Fatalf("--to-current: exit %d, committed %d, want 100:\n%s", code, committed(), out)
	}
	// Every record was produced within the hour: back to the start.
	if out, code := group("reset-offsets", "--group", "g", "--all-topics", "--by-duration", "PT1H", "--execute"); code != 0 || committed() != 0 {
		t.Fatalf("--by-duration: exit %d, committed %d, want 0:\n%s", code, committed(), out)
	}
	js, _ := run(t, time.Minute, "status", "--etcd", e.Endpoints[0], "--group", "g")
	t.Log(js)
	// The next member starts at the new offsets: it handles all 100 again.
	rec2 := filepath.Join(t.TempDir(), "2.jsonl")
	m = startMember(rec2)
	testutil.WaitFor(t, "the second pass to handle all 100 again", 60*time.Second, func() bool { return lines(rec2) >= 100 && committed() == 100 })
	_ = m.Process.Signal(os.Interrupt)
	_ = m.Wait()

	out, code = group("delete", "--group", "g", "--kafka-offsets")
	if code != 0 || !strings.Contains(out, "deleted group g") {
		t.Fatalf("delete: exit %d:\n%s", code, out)
	}
	if n := keyCount(t, cli, "/keyshare/g/"); n != 0 {
		t.Fatalf("%d keys left under /keyshare/g/", n)
	}
	if c := testutil.Committed(t, k.Brokers, "g", "orders", 2); len(c) != 0 {
		t.Fatalf("Kafka still has committed offsets %v", c)
	}
}

func maxInt(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

// TestGroupResetWhilePaused runs the reset an operator makes on a running
// group: pause, reset-offsets --to-earliest --execute beside the running
// member, resume. The member handles every record again from offset 0
// (its record log holds each offset twice) and the committed offset comes
// back to the end; describe shows the reset while paused.
func TestGroupResetWhilePaused(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	conn := []string{"--etcd", e.Endpoints[0], "--brokers", k.Brokers}
	if out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "100", "--keys", "10", "--quiet"); code != 0 {
		t.Fatalf("produce: %s", out)
	}
	rec := filepath.Join(t.TempDir(), "records.jsonl")
	m := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "m1", "--ttl", "2s", "--record", rec)
	var mout bytes.Buffer
	m.Stdout, m.Stderr = &mout, &mout
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
	committed := func() int64 { return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] }
	// perOffset counts the handled records of each offset in the record log.
	perOffset := func() map[int64]int {
		b, _ := os.ReadFile(rec)
		out := make(map[int64]int)
		for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
			var r struct {
				Offset int64 `json:"offset"`
			}
			if len(line) > 0 && json.Unmarshal(line, &r) == nil {
				out[r.Offset]++
			}
		}
		return out
	}
	group := func(args ...string) string {
		t.Helper()
		out, code := run(t, time.Minute, append(append([]string{"group"}, args...), conn...)...)
		if code != 0 {
			t.Fatalf("group %v: exit %d:\n%s", args, code, out)
		}
		return out
	}
	testutil.WaitFor(t, "the first pass to commit all 100", 60*time.Second, func() bool { return committed() == 100 })

	group("pause", "--group", "g")
	out := group("reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest")
	if !strings.Contains(out, "dry run: nothing changed") || committed() != 100 {
		t.Fatalf("dry run while paused changed the committed offset (%d) or said:\n%s", committed(), out)
	}
	out = group("reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest", "--execute")
	if !strings.Contains(out, "reset 1 partitions of group g") {
		t.Fatalf("reset while paused:\n%s", out)
	}
	if c := committed(); c != 0 {
		t.Fatalf("Kafka's committed offset is %d after the reset, want 0", c)
	}
	if out := group("describe", "--group", "g"); !strings.Contains(out, "PAUSED") {
		t.Fatalf("describe after the reset:\n%s", out)
	}
	group("resume", "--group", "g")
	testutil.WaitFor(t, "every record handled again and committed", 60*time.Second, func() bool {
		return len(perOffset()) == 100 && committed() == 100 && func() bool {
			for _, n := range perOffset() {
				if n != 2 {
					return false
				}
			}
			return true
		}()
	})
	_ = m.Process.Signal(os.Interrupt)
	_ = m.Wait()
	if !strings.Contains(mout.String(), "range reset by an operator") {
		t.Errorf("the member did not log the reset:\n%s", mout.String())
	}
}

// TestGroupPauseResume: a paused group takes no records — not while its
// member runs, and not after the member restarts — while status says so;
// resume lets every record through once.
func TestGroupPauseResume(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	conn := []string{"--etcd", e.Endpoints[0], "--brokers", k.Brokers}
	produce := func(n string) {
		t.Helper()
		if out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", n, "--keys", "10", "--quiet"); code != 0 {
			t.Fatalf("produce: %s", out)
		}
	}
	rec := filepath.Join(t.TempDir(), "records.jsonl")
	handled := func() int {
		b, _ := os.ReadFile(rec)
		return bytes.Count(b, []byte("\n"))
	}
	start := func() *exec.Cmd {
		m := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "m1", "--ttl", "2s", "--record", rec)
		var out bytes.Buffer
		m.Stdout, m.Stderr = &out, &out
		if err := m.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
		return m
	}
	group := func(args ...string) string {
		t.Helper()
		out, code := run(t, time.Minute, append(append([]string{"group"}, args...), conn...)...)
		if code != 0 {
			t.Fatalf("group %v: exit %d:\n%s", args, code, out)
		}
		return out
	}
	// quiet checks that nothing is handled for a while: the pause holds.
	quiet := func(want int) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if n := handled(); n != want {
				t.Fatalf("%d records handled while the group is paused, want %d", n, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	produce("100")
	m := start()
	testutil.WaitFor(t, "the first 100 handled", 60*time.Second, func() bool { return handled() == 100 })
	group("pause", "--group", "g", "--reason", "bad deploy")
	out := group("describe", "--group", "g")
	if !strings.Contains(out, "group g: Paused, 1 members") || !strings.Contains(out, "PAUSED since") || !strings.Contains(out, "bad deploy") {
		t.Fatalf("describe does not show the pause:\n%s", out)
	}
	produce("50")
	quiet(100)

	// The pause outlives the member.
	_ = m.Process.Signal(os.Interrupt)
	_ = m.Wait()
	start()
	quiet(100)

	if out := group("describe", "--group", "g", "--state"); out != "group g: Paused, 1 members\n" {
		t.Fatalf("describe --state: %q", out)
	}
	if out := group("resume", "--group", "g"); !strings.Contains(out, "resumed group g") {
		t.Fatalf("resume: %s", out)
	}
	testutil.WaitFor(t, "the other 50 handled after resume", 60*time.Second, func() bool { return handled() >= 150 })
	testutil.WaitFor(t, "committed == end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 150
	})
	if n := handled(); n != 150 {
		t.Fatalf("%d records handled, want 150 (each once)", n)
	}
	if out := group("describe", "--group", "g"); strings.Contains(out, "PAUSED") {
		t.Fatalf("describe still shows a pause after resume:\n%s", out)
	}
}
