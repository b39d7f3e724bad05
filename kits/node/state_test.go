package nodekit_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/statestore/statestoretest"
	"github.com/keyshare/keyshare/testutil"
)

// stateBreakEnv, set to "previous" or "sent", breaks the kit in the test's
// endpoints (testdata/state-endpoint.js --break): TestMemberKeepsStateForNodeKit
// must then fail, which shows that its check can.
const stateBreakEnv = "KEYSHARE_NODE_KIT_STATE_BREAK"

// TestMemberKeepsStateForNodeKit: two `keyshare member --deliver
// --state` processes deliver to endpoints built with the kit that count
// each key's records with only the state the member sends: a in batches
// of 4 to createEndpoint (a call per record, the kit carrying the state
// from a key's record to its next), b in batches of 8 to
// createBatchEndpoint. a is SIGKILLed mid-run, so b restores a's ranges'
// state from the changelog and takes over. Each key's count in the
// changelog, read by the restore rule, is its number of records.
func TestMemberKeepsStateForNodeKit(t *testing.T) {
	requireNode(t)
	keyshareBin(t) // built before the clocks below start
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	log := filepath.Join(t.TempDir(), "answers.jsonl")
	var broken []string
	if b := os.Getenv(stateBreakEnv); b != "" {
		broken = []string{"--break", b}
		t.Logf("%s=%s: the kit is broken on purpose; this test must fail", stateBreakEnv, b)
	}
	perRecord := startNodeEndpoint(t, "state-endpoint.js", append([]string{"--log", log}, broken...)...)
	batch := startNodeEndpoint(t, "state-endpoint.js", append([]string{"--log", log, "--batch"}, broken...)...)

	const n, keys = 1200, 20
	member := func(id, url string, extra ...string) *exec.Cmd {
		return startMember(t, append([]string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
			"--id", id, "--rebalance-debounce", "100ms", "--ttl", "2s", "--failover-grace", "0s", "--concurrency", "4",
			"--balance", "width", "--state", "--deliver", url, "--log-level", "warn"}, extra...)...)
	}
	// a records its ledger in etcd rarely: much of what it delivered runs
	// again on b, which must skip it by the state's applied offsets.
	a := member("a", perRecord.url, "--batch-size", "4", "--flush-interval", "5s")
	member("b", batch.url, "--batch-size", "8")
	records := testutil.KeyedRecords(n, keys)
	testutil.Produce(t, k.Brokers, "orders", records[:n/2])
	testutil.WaitFor(t, "a delivers", 30*time.Second, func() bool { return answeredBy(t, log)["a"] >= 50 })
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	byA := answeredBy(t, log)["a"]
	testutil.Produce(t, k.Brokers, "orders", records[n/2:])
	testutil.WaitFor(t, "every record committed, by b", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})
	if byA >= n/2 {
		t.Fatalf("a had answered %d records when it was killed, all it was given: nothing moved to b mid-run", byA)
	}

	counts := statestoretest.Counts(t, k.Brokers, "g-orders-state", 1)
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
	t.Logf("answered: %v (a killed after %d); %d of %d keys counted wrong", answeredBy(t, log), byA, wrong, len(want))
}

// answeredBy counts the endpoints' log lines by member.
func answeredBy(t *testing.T, log string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[string]int{}
	for line := range strings.Lines(string(b)) {
		var a struct{ Member string }
		if json.Unmarshal([]byte(line), &a) == nil {
			out[a.Member]++
		}
	}
	return out
}
