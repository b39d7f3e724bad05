package main

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/statestore"
	"github.com/keyshare/keyshare/statestore/statestoretest"
	"github.com/keyshare/keyshare/testutil"
)

// stateEndpoint is testdata/state_endpoint.py, which counts each key's
// records with only the state the member sends.
type stateEndpoint struct {
	addr, log string
	ownMemory bool // --own-memory: ignore the state sent (the switch-off)
	cmd       *exec.Cmd
}

func (e *stateEndpoint) start(t *testing.T) {
	t.Helper()
	_, port, _ := net.SplitHostPort(e.addr)
	args := []string{"testdata/state_endpoint.py", "--port", port, "--log", e.log, "--delay", "0.005"}
	if e.ownMemory {
		args = append(args, "--own-memory")
	}
	cmd := exec.Command("python3", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 testdata/state_endpoint.py (the delivery tests need python3): %v", err)
	}
	e.cmd = cmd
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening on") {
		t.Fatalf("state_endpoint.py did not start (%v): %q", err, line)
	}
}

// kill ends the endpoint at once, as a crash does.
func (e *stateEndpoint) kill() {
	if e.cmd != nil {
		_ = e.cmd.Process.Kill()
		_ = e.cmd.Wait()
		e.cmd = nil
	}
}

// stateAnswer is a line of the endpoint's log: a record it answered.
type stateAnswer struct {
	Member string
	Offset int64
}

// answers is what the endpoint answered, in order.
func (e *stateEndpoint) answers(t *testing.T) []stateAnswer {
	t.Helper()
	b, err := os.ReadFile(e.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []stateAnswer
	for line := range strings.Lines(string(b)) {
		var a stateAnswer
		if json.Unmarshal([]byte(line), &a) == nil {
			out = append(out, a)
		}
	}
	return out
}

// answeredBy counts the records the endpoint answered for member.
func (e *stateEndpoint) answeredBy(t *testing.T, member string) int {
	t.Helper()
	n := 0
	for _, a := range e.answers(t) {
		if a.Member == member {
			n++
		}
	}
	return n
}

// TestMemberKeepsStateForEndpoint: two members deliver with --state to
// the Python endpoint, which counts each key's records using only the
// state the member sends with each record (b in batches, where a key's
// later records come with "previous"). a is SIGKILLed mid-run, so b
// restores a's ranges' state from the changelog and runs again the
// records a had not recorded in etcd, skipping those whose change the
// changelog has: only a's requests open at the kill (up to its
// --concurrency) reach the endpoint again. Then the endpoint itself is
// killed and started again, and more records come. Each key's count in
// the changelog, read by the restore rule, is exactly its number of
// records.
//
// KEYSHARE_TEST_OWN_MEMORY=1 runs the endpoint with --own-memory (it
// ignores the state sent and counts in its memory, lost with the
// endpoint's restart): the counts come out wrong, so the check bites.
func TestMemberKeepsStateForEndpoint(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	ep := &stateEndpoint{addr: freePort(t), log: filepath.Join(t.TempDir(), "answers.jsonl"), ownMemory: os.Getenv("KEYSHARE_TEST_OWN_MEMORY") != ""}
	ep.start(t)
	t.Cleanup(ep.kill)
	const n, keys = 2000, 20
	member := func(id string, extra ...string) []string {
		return append([]string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", id,
			"--rebalance-debounce", "100ms", "--ttl", "2s", "--failover-grace", "0s", "--concurrency", "4",
			"--balance", "width", "--state", "--deliver", "http://" + ep.addr + "/"}, extra...)
	}
	// a records its ledger in etcd rarely: most of what it delivers
	// before the kill runs again on b, where the skip rule must find it.
	a, _ := startDeliveringMember(t, member("a", "--flush-interval", "5s")...)
	bMetrics := freePort(t)
	// b keeps its state on disk: a's ranges restore into its Pebble store.
	_, bLog := startDeliveringMember(t, member("b", "--batch-size", "4", "--metrics-addr", bMetrics, "--state-dir", filepath.Join(t.TempDir(), "b-state"))...)
	testutil.WaitFor(t, "a and b own ranges", 30*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		return err == nil && len(snap.Owned("a")) > 0 && len(snap.Owned("b")) > 0
	})

	records := testutil.KeyedRecords(n, keys)
	testutil.Produce(t, k.Brokers, "orders", records[:n/2])
	testutil.WaitFor(t, "a delivers", 30*time.Second, func() bool { return ep.answeredBy(t, "a") >= 50 })
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	byA := ep.answeredBy(t, "a")
	testutil.WaitFor(t, "the first half committed, by b", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n/2
	})
	if byA >= n/2 {
		t.Fatalf("a had delivered all %d records when it was killed: nothing moved to b mid-run", byA)
	}

	ep.kill()
	ep.start(t)
	testutil.Produce(t, k.Brokers, "orders", records[n/2:])
	testutil.WaitFor(t, "every record committed", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})

	// b took a's range with a's keys' state, read from the changelog.
	if m := restoredKeys.FindAllStringSubmatch(bLog.String(), -1); len(m) == 0 || m[len(m)-1][1] == "0" {
		t.Errorf("b's last restore of a range took no key's state (%q): a's state did not move to b", m)
	}
	// b's metrics count the restores and changes, and it is ready once
	// its restores are done.
	if code, body := get(t, "http://"+bMetrics+"/readyz"); code != 200 {
		t.Errorf("b not ready after every record: %d %s", code, body)
	}
	_, body := get(t, "http://"+bMetrics+"/metrics")
	for _, name := range []string{"keyshare_state_restores_total", "keyshare_state_changes_total", "keyshare_state_skipped_total"} {
		if m := regexp.MustCompile(name + `\{group="g"\} ([0-9.e+]+)`).FindStringSubmatch(body); m == nil || m[1] == "0" {
			t.Errorf("b's metrics show %s %q, want above 0", name, m)
		}
	}
	byB := map[int64]bool{}
	again := 0
	for _, a := range ep.answers(t) {
		switch {
		case a.Member == "b":
			byB[a.Offset] = true
		case byB[a.Offset]:
			t.Errorf("offset %d answered by b, then by a", a.Offset)
		}
	}
	for _, a := range ep.answers(t) {
		if a.Member == "a" && byB[a.Offset] {
			again++
		}
	}
	if again > 4 {
		t.Errorf("b sent %d records again that a had delivered, want at most 4 (a's requests open at the kill): the others' changes were in the changelog, and the skip rule must leave them", again)
	}

	counts := statestoretest.Counts(t, k.Brokers, statestore.DefaultChangelog("g", "orders"), 1)
	want := map[string]int{}
	for _, r := range records {
		want[string(r.Key)]++
	}
	wrong := 0
	for key, w := range want {
		if counts[key] != w {
			wrong++
			t.Errorf("key %s counted %d in the changelog, want %d (its records)", key, counts[key], w)
		}
	}
	t.Logf("a answered %d records before it was killed, %d of them again by b; b %d in all; %d of %d keys counted wrong", byA, again, ep.answeredBy(t, "b"), wrong, len(want))
}

// restoredKeys finds the keys of a range's restore in a member's log.
var restoredKeys = regexp.MustCompile(`range state restored: .* keys=(\d+)`)
