package nodekit_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestNodeUnitTests runs the kit's own tests (test/*.test.js) with node's
// built-in test runner.
func TestNodeUnitTests(t *testing.T) {
	node := requireNode(t)
	files, err := filepath.Glob(filepath.Join("test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test/*.test.js (%v)", err)
	}
	cmd := exec.CommandContext(t.Context(), node, append([]string{"--test"}, files...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", strings.Join(files, " "), err, out)
	}
	t.Logf("node --test: %s", lastLines(string(out), 8))
}

// breakEnv, when set to "drop" or "late", makes the test's Node endpoints
// wrong on purpose (testdata/endpoint.js --break): TestMemberDeliversToNodeKit
// must then fail, which shows that its checks can.
const breakEnv = "KEYSHARE_NODE_KIT_BREAK"

// TestMemberDeliversToNodeKit: two `keyshare member --deliver` processes
// deliver to endpoints built with the kit, member a one record per
// request to createEndpoint, member b batches of up to 16 to
// createBatchEndpoint; b joins while a delivers, so ranges move from a to
// b and records keep coming. The members send a bearer token and a
// deadline, which the endpoints check. Every record is applied with the fields the
// member sent (its partition and offset hold the value produced there),
// each key's records in offset order, none twice (the handoff is
// graceful), and a key's fence never goes back.
func TestMemberDeliversToNodeKit(t *testing.T) {
	requireNode(t)
	keyshareBin(t) // built before the clocks below start
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 2})
	logFile := filepath.Join(t.TempDir(), "applied.jsonl")
	var broken []string
	if b := os.Getenv(breakEnv); b != "" {
		broken = []string{"--break", b}
		t.Logf("%s=%s: the endpoints are wrong on purpose; this test must fail", breakEnv, b)
	}
	// The member's token and deadline headers, as the kit reads them.
	const token = "kit-test-token"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	perRecord := startNodeEndpoint(t, "endpoint.js", append([]string{"--log", logFile, "--token", token}, broken...)...)
	batch := startNodeEndpoint(t, "endpoint.js", append([]string{"--log", logFile, "--token", token, "--batch"}, broken...)...)

	const n, keys = 600, 20
	records := testutil.KeyedRecords(n, keys)
	for i := range records {
		records[i].Partition = int32(i % keys % 2) // a key's records in one partition
	}
	produced := testutil.Produce(t, k.Brokers, "orders", records[:n/2])
	member := func(id, url string, extra ...string) []string {
		return append([]string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
			"--id", id, "--rebalance-debounce", "100ms", "--deliver", url,
			"--deliver-token-file", tokenFile, "--deliver-timeout", "10s"}, extra...)
	}
	startMember(t, member("a", perRecord.url)...)
	testutil.WaitFor(t, "a delivers", 30*time.Second, func() bool { return len(readApplied(t, logFile)) > 0 })
	startMember(t, member("b", batch.url, "--batch-size", "16")...)
	testutil.WaitFor(t, "b owns a range", 30*time.Second, func() bool { return owners(t, e.Endpoints[0], "g")["b"] })
	produced = append(produced, testutil.Produce(t, k.Brokers, "orders", records[n/2:])...)
	testutil.WaitFor(t, "every record delivered and committed", 60*time.Second, func() bool {
		c := testutil.Committed(t, k.Brokers, "g", "orders", 2)
		return c[0]+c[1] == n
	})
	want := map[string]string{} // "partition/offset" → the value produced there
	for i, tp := range produced {
		want[fmt.Sprintf("%d/%d", tp.Partition, tp.Offset)] = string(records[i].Value)
	}
	got := waitApplied(t, logFile, want, 5*time.Second)
	checkApplied(t, got, want, keys)
}

// applied is a line of testdata/endpoint.js's log: a record as the kit
// decoded it.
type applied struct {
	Member    string `json:"member"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Attempt   int    `json:"attempt"`
	Hash      uint64 `json:"hash"`
	Range     *struct {
		Lo uint64 `json:"lo"`
		Hi uint64 `json:"hi"`
	} `json:"range"`
	Fence     *int64  `json:"fence"`
	Key       *string `json:"key"`
	Value     *string `json:"value"`
	Timestamp *int64  `json:"timestamp"`
}

func readApplied(t testing.TB, file string) []applied {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []applied
	for line := range strings.Lines(string(b)) {
		var a applied
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			continue // a line being written
		}
		out = append(out, a)
	}
	return out
}

// waitApplied reads the log until it has every record of want, or for
// at most d more (the Kafka commit can come before the log's last line
// when an endpoint writes late), and returns it.
func waitApplied(t testing.TB, file string, want map[string]string, d time.Duration) []applied {
	t.Helper()
	end := time.Now().Add(d)
	for {
		got := readApplied(t, file)
		seen := map[string]bool{}
		for _, a := range got {
			seen[fmt.Sprintf("%d/%d", a.Partition, a.Offset)] = true
		}
		if len(seen) >= len(want) || time.Now().After(end) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkApplied fails t unless got has every record of want once, as
// produced, each key's records in the order produced ("key-K:SEQ", SEQ
// from 0), from both members, each with the range holding its hash and a
// fence that never goes back for its key.
func checkApplied(t *testing.T, got []applied, want map[string]string, keys int) {
	t.Helper()
	times := map[string]int{}
	next := map[string]int{}    // by key, the SEQ expected next
	fence := map[string]int64{} // by key, the last token seen
	byMember := map[string]int{}
	for _, a := range got {
		at := fmt.Sprintf("%d/%d", a.Partition, a.Offset)
		if a.Value == nil || a.Key == nil || want[at] != *a.Value || a.Topic != "orders" || a.Timestamp == nil || a.Attempt < 1 {
			t.Fatalf("%s: applied %+v, want topic orders, the value %q produced there, a key, a timestamp and an attempt", at, a, want[at])
		}
		if a.Fence == nil || a.Range == nil || a.Hash < a.Range.Lo || a.Hash >= a.Range.Hi {
			t.Fatalf("%s: hash %d, range %v, fence %v: want the range holding the hash and its token", *a.Value, a.Hash, a.Range, a.Fence)
		}
		times[at]++
		byMember[a.Member]++
		k, seq, _ := strings.Cut(*a.Value, ":")
		s, _ := strconv.Atoi(seq)
		if s > next[k] {
			t.Errorf("%s: %s was applied before %s:%d", k, *a.Value, k, next[k])
		}
		next[k] = max(next[k], s+1)
		if *a.Fence < fence[k] {
			t.Errorf("%s came with fence %d after a record of its key with fence %d", *a.Value, *a.Fence, fence[k])
		}
		fence[k] = *a.Fence
	}
	var missing, twice []string
	for at := range want {
		switch c := times[at]; {
		case c == 0:
			missing = append(missing, at)
		case c > 1:
			twice = append(twice, at)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d records never applied (partition/offset: %s)", len(missing), len(want), firstFew(missing))
	}
	if len(twice) > 0 {
		t.Errorf("%d records applied twice through a graceful handoff, want none (%s)", len(twice), firstFew(twice))
	}
	if len(next) != keys {
		t.Errorf("records of %d keys applied, want %d", len(next), keys)
	}
	if byMember["a"] == 0 || byMember["b"] == 0 {
		t.Errorf("records applied per member %v: want both to deliver", byMember)
	}
}

func firstFew(s []string) string {
	if len(s) > 5 {
		return strings.Join(s[:5], " ") + " …"
	}
	return strings.Join(s, " ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
