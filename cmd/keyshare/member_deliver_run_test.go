package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// pyEndpoint is testdata/endpoint.py (the example of docs/delivery.md)
// running on a port of its own.
type pyEndpoint struct {
	addr, log string
	refuse    string
	delayFile string // --delay-file: the seconds the endpoint waits before answering
	cmd       *exec.Cmd
}

// startPyEndpoint starts the endpoint on addr and waits until it listens.
func startPyEndpoint(t *testing.T, e *pyEndpoint) {
	t.Helper()
	_, port, _ := net.SplitHostPort(e.addr)
	args := []string{"testdata/endpoint.py", "--port", port, "--log", e.log}
	if e.refuse != "" {
		args = append(args, "--refuse-key", e.refuse)
	}
	if e.delayFile != "" {
		args = append(args, "--delay-file", e.delayFile)
	}
	cmd := exec.Command("python3", args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 testdata/endpoint.py (the delivery tests need python3): %v", err)
	}
	e.cmd = cmd
	t.Cleanup(e.stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening on") {
		t.Fatalf("endpoint.py did not start (%v): %q", err, line)
	}
}

// startDelayingPyEndpoint starts the endpoint with --delay-file, and
// returns it and the function that sets the seconds it waits before
// answering ("0": none).
func startDelayingPyEndpoint(t *testing.T) (*pyEndpoint, func(seconds string)) {
	t.Helper()
	dir := t.TempDir()
	ep := &pyEndpoint{addr: freePort(t), log: filepath.Join(dir, "applied.jsonl"), delayFile: filepath.Join(dir, "delay")}
	startPyEndpoint(t, ep)
	return ep, func(seconds string) {
		if err := os.WriteFile(ep.delayFile, []byte(seconds), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// stop kills the endpoint (no graceful end: a crash).
func (e *pyEndpoint) stop() {
	if e.cmd != nil {
		_ = e.cmd.Process.Kill()
		_ = e.cmd.Wait()
		e.cmd = nil
	}
}

// applied is a line of the endpoint's log.
type applied struct {
	Member    string `json:"member"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Attempt   int    `json:"attempt"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	Hash      uint64 `json:"hash"`
	Range     *struct {
		Lo uint64 `json:"lo"`
		Hi uint64 `json:"hi"`
	} `json:"range"`
	Fence *int64 `json:"fence"`
	// Cancelled, on a line of its own, holds the offsets of a request the
	// member closed while the endpoint waited (--delay-file); none of
	// them was applied. Sent and Closed are when it came and went (Unix
	// seconds).
	Cancelled    []int64 `json:"cancelled"`
	Sent, Closed float64
}

// applied is what the endpoint applied, in order.
func (e *pyEndpoint) applied(t *testing.T) []applied {
	t.Helper()
	var out []applied
	for _, a := range e.lines(t) {
		if a.Cancelled == nil {
			out = append(out, a)
		}
	}
	return out
}

// cancelled is the requests a member closed before the endpoint answered.
func (e *pyEndpoint) cancelled(t *testing.T) []applied {
	t.Helper()
	var out []applied
	for _, a := range e.lines(t) {
		if a.Cancelled != nil {
			out = append(out, a)
		}
	}
	return out
}

func (e *pyEndpoint) lines(t *testing.T) []applied {
	t.Helper()
	b, err := os.ReadFile(e.log)
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

// startDeliveringMember runs `keyshare member --deliver` with args; its
// output goes to the log it returns.
func startDeliveringMember(t *testing.T, args ...string) (*exec.Cmd, *testutil.Buffer) {
	t.Helper()
	var log testutil.Buffer
	cmd := exec.Command(bin, append([]string{"member"}, args...)...)
	cmd.Env = flagFreeEnv()
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("member %v log:\n%s", args, log.String())
		}
	})
	return cmd, &log
}

// checkKeyOrder fails t unless each key's values reached the endpoint in
// the order they were produced ("key-K:SEQ", SEQ from 0) with none
// missing; it returns how many records came more than once.
func checkKeyOrder(t *testing.T, got []applied, n, keys int) (dups int) {
	t.Helper()
	next := map[string]int{}
	for _, a := range got {
		k, seq, _ := strings.Cut(a.Value, ":")
		s, _ := strconv.Atoi(seq)
		switch {
		case s == next[k]:
			next[k]++
		case s < next[k]:
			dups++ // sent again: only from an earlier point of the key, never ahead of it
		default:
			t.Errorf("%s: %s reached the endpoint before %s:%d", k, a.Value, k, next[k])
			return dups
		}
	}
	total := 0
	for _, c := range next {
		total += c
	}
	if total != n || len(next) != keys {
		t.Errorf("%d records of %d keys reached the endpoint, want %d of %d", total, len(next), n, keys)
	}
	return dups
}

// TestMemberDeliversInKeyOrder: two members deliver to the Python
// endpoint, one record per request and in batches; the second joins while
// the first is delivering, so a partition moves between them, and records
// keep coming. Every record arrives, each key's in offset order, none
// twice (the handoff is graceful).
func TestMemberDeliversInKeyOrder(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 2})
	ep := &pyEndpoint{addr: freePort(t), log: filepath.Join(t.TempDir(), "applied.jsonl")}
	startPyEndpoint(t, ep)
	const n, keys = 600, 20
	records := testutil.KeyedRecords(n, keys)
	for i := range records {
		records[i].Partition = int32(i % keys % 2) // a key's records in one partition
	}
	testutil.Produce(t, k.Brokers, "orders", records[:n/2])
	member := func(id string, extra ...string) []string {
		return append([]string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
			"--id", id, "--rebalance-debounce", "100ms", "--deliver", "http://" + ep.addr + "/records"}, extra...)
	}
	startDeliveringMember(t, member("a")...)
	testutil.WaitFor(t, "a delivers", 30*time.Second, func() bool { return len(ep.applied(t)) > 0 })
	startDeliveringMember(t, member("b", "--batch-size", "16")...)
	testutil.WaitFor(t, "b owns a partition", 30*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		return err == nil && len(snap.Owned("b")) > 0
	})
	testutil.Produce(t, k.Brokers, "orders", records[n/2:])
	testutil.WaitFor(t, "every record delivered and committed", 60*time.Second, func() bool {
		c := testutil.Committed(t, k.Brokers, "g", "orders", 2)
		return c[0]+c[1] == n
	})
	got := ep.applied(t)
	if dups := checkKeyOrder(t, got, n, keys); dups != 0 {
		t.Errorf("%d records delivered twice, want none", dups)
	}
	byMember := map[string]int{}
	fence := map[string]int64{} // by key, the last token seen
	for _, a := range got {
		byMember[a.Member]++
		if a.Fence == nil || a.Range == nil || a.Hash < a.Range.Lo || a.Hash >= a.Range.Hi {
			t.Fatalf("%s: hash %d, range %v, fence %v: want the range holding the hash and its token", a.Value, a.Hash, a.Range, a.Fence)
		}
		// A key's records come in order; a later owner's token is larger.
		if *a.Fence < fence[a.Key] {
			t.Errorf("%s came with fence %d after a record of its key with fence %d", a.Value, *a.Fence, fence[a.Key])
		}
		fence[a.Key] = *a.Fence
	}
	if byMember["a"] == 0 || byMember["b"] == 0 {
		t.Errorf("records per member %v: want both to deliver", byMember)
	}
}

// TestMemberDeadLettersRefusedRecord: the endpoint refuses one key with a
// 422; its record is tried --max-attempts times (the endpoint sees
// attempts 1 and 2), then dead-lettered with the endpoint's text, and the
// records behind it are delivered.
func TestMemberDeadLettersRefusedRecord(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	ep := &pyEndpoint{addr: freePort(t), log: filepath.Join(t.TempDir(), "applied.jsonl"), refuse: "key-3"}
	startPyEndpoint(t, ep)
	const n, keys = 40, 5
	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(n, keys))
	startDeliveringMember(t, "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
		"--id", "a", "--deliver", "http://"+ep.addr+"/", "--dlq", "orders.dlq", "--max-attempts", "2", "--retry-backoff", "10ms")
	testutil.WaitFor(t, "the commit past every record", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})
	dead := readPartition(t, k.Brokers, "orders.dlq")
	if len(dead) != n/keys {
		t.Fatalf("%d dead letters, want the %d records of key-3", len(dead), n/keys)
	}
	for _, m := range dead {
		if string(m.Key) != "key-3" || header(m, "keyshare.attempts") != "2" ||
			!strings.Contains(header(m, "keyshare.error"), "refused the record (422 Unprocessable Entity): key key-3 is refused") {
			t.Errorf("dead letter %s: attempts %q, error %q; want key-3 after 2 attempts with the endpoint's text",
				m.Key, header(m, "keyshare.attempts"), header(m, "keyshare.error"))
		}
	}
	got := ep.applied(t)
	if len(got) != n-n/keys {
		t.Errorf("%d records applied, want the %d of the other keys", len(got), n-n/keys)
	}
}

// TestMemberWaitsOutEndpointDown: the endpoint is killed while records
// flow and started again seconds later. With --max-attempts 1 and a
// dead-letter topic, a single attempt counted against a record would
// dead-letter it: none is, every record arrives in key order, and the
// member reports not ready while the endpoint is down.
func TestMemberWaitsOutEndpointDown(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	ep := &pyEndpoint{addr: freePort(t), log: filepath.Join(t.TempDir(), "applied.jsonl")}
	startPyEndpoint(t, ep)
	metrics := freePort(t)
	const keys = 10
	records := testutil.KeyedRecords(400, keys)
	testutil.Produce(t, k.Brokers, "orders", records[:200])
	startDeliveringMember(t, "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
		"--id", "a", "--deliver", "http://"+ep.addr+"/", "--deliver-timeout", "1s", "--dlq", "orders.dlq", "--max-attempts", "1",
		"--metrics-addr", metrics)
	testutil.WaitFor(t, "the first records delivered", 30*time.Second, func() bool { return len(ep.applied(t)) >= 200 })
	ep.stop()
	testutil.Produce(t, k.Brokers, "orders", records[200:])
	testutil.WaitFor(t, "the member not ready while the endpoint is down", 30*time.Second, func() bool {
		code, body := get(t, "http://"+metrics+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "delivery endpoint http://"+ep.addr+"/ not answering")
	})
	time.Sleep(2 * time.Second) // down for a while: workers wait, retrying
	startPyEndpoint(t, ep)
	testutil.WaitFor(t, "the commit past every record", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == int64(len(records))
	})
	if dead := endOffset(t, k.Brokers, "orders.dlq"); dead != 0 {
		t.Errorf("%d records dead-lettered while the endpoint was down, want none", dead)
	}
	// The endpoint killed mid-request may have applied records it never
	// answered about: those are sent again, at most one per worker.
	if dups := checkKeyOrder(t, ep.applied(t), len(records), keys); dups > 16 {
		t.Errorf("%d records applied twice, want at most one per request open at the kill (--concurrency 16)", dups)
	}
	testutil.WaitFor(t, "the member ready again", 30*time.Second, func() bool {
		code, _ := get(t, "http://"+metrics+"/readyz")
		return code == http.StatusOK
	})
	_, body := get(t, "http://"+metrics+"/metrics")
	for _, want := range []string{`keyshare_deliver_requests_total{group="g",outcome="trouble"}`, `keyshare_deliver_records_total{group="g",outcome="done"} 400`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func header(m *kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

// endOffset is the end of partition 0 of topic.
func endOffset(t *testing.T, brokers, topic string) int64 {
	t.Helper()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "reader", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, hi, err := c.QueryWatermarkOffsets(topic, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return hi
}

// readPartition reads partition 0 of topic up to its end.
func readPartition(t *testing.T, brokers, topic string) []*kafka.Message {
	t.Helper()
	end := endOffset(t, brokers, topic)
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": "reader", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: 0}}); err != nil {
		t.Fatal(err)
	}
	var out []*kafka.Message
	for int64(len(out)) < end {
		m, err := c.ReadMessage(20 * time.Second)
		if err != nil {
			t.Fatalf("read %s: %d of %d records: %v", topic, len(out), end, err)
		}
		out = append(out, m)
	}
	return out
}

// TestMemberDeliversOverTLS: an https:// endpoint that trusts only the
// test's CA for client certificates and wants a bearer token and a tenant
// header: the member verifies it with --deliver-ca, presents
// --deliver-cert/--deliver-key and sends --deliver-token-file and
// --deliver-header-file on every request; every record arrives.
func TestMemberDeliversOverTLS(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	dir := t.TempDir()
	ca := testutil.NewCA(t, "deliver")
	now := time.Now()
	srvCert, srvKey := ca.Issue(t, "endpoint", true, now.Add(-time.Hour), now.Add(time.Hour))
	cliCert, cliKey := ca.Issue(t, "member", false, now.Add(-time.Hour), now.Add(time.Hour))
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	offsets := map[int64]bool{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-123" || r.Header.Get("X-Tenant") != "blue" || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "who are you", http.StatusUnauthorized)
			return
		}
		var req struct {
			Records []struct {
				Offset int64 `json:"offset"`
			} `json:"records"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rec := range req.Records {
			offsets[rec.Offset] = true
		}
		mu.Unlock()
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	token := filepath.Join(dir, "token")
	headers := filepath.Join(dir, "headers")
	if err := os.WriteFile(token, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(headers, []byte("X-Tenant: blue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const n = 50
	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(n, 5))
	_, log := startDeliveringMember(t, "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "a",
		"--deliver", srv.URL+"/", "--deliver-ca", ca.CertFile, "--deliver-cert", cliCert, "--deliver-key", cliKey,
		"--deliver-token-file", token, "--deliver-header-file", headers, "--batch-size", "8", "--log-level", "trace")
	testutil.WaitFor(t, "the commit past every record", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})
	mu.Lock()
	defer mu.Unlock()
	if len(offsets) != n {
		t.Errorf("the endpoint took %d records, want %d", len(offsets), n)
	}
	for _, secret := range []string{"tok-123", "blue"} {
		if strings.Contains(log.String(), secret) {
			t.Errorf("the member's trace-level log shows %q", secret)
		}
	}
}

// TestMemberCrashRedeliversOnlyItsUnflushedRecords: a member killed while
// it delivers loses nothing: its ranges' next owner delivers every record
// it had not recorded in etcd, in key order. The only records the endpoint
// gets twice are some the killed member delivered (its work since its last
// ledger flush, and its requests open at the kill); the survivor delivers
// none twice.
func TestMemberCrashRedeliversOnlyItsUnflushedRecords(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	ep := &pyEndpoint{addr: freePort(t), log: filepath.Join(t.TempDir(), "applied.jsonl")}
	startPyEndpoint(t, ep)
	const n, keys = 3000, 20
	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(n, keys))
	member := func(id string) []string {
		return []string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", id,
			"--rebalance-debounce", "100ms", "--ttl", "2s", "--failover-grace", "0s", "--concurrency", "2",
			"--deliver", "http://" + ep.addr + "/"}
	}
	a, _ := startDeliveringMember(t, member("a")...)
	startDeliveringMember(t, member("b")...)
	testutil.WaitFor(t, "a and b own ranges", 30*time.Second, func() bool {
		snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
		return err == nil && len(snap.Owned("a")) > 0 && len(snap.Owned("b")) > 0
	})
	testutil.WaitFor(t, "a delivers", 30*time.Second, func() bool {
		for _, r := range ep.applied(t) {
			if r.Member == "a" {
				return true
			}
		}
		return false
	})
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "every record committed", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})
	got := ep.applied(t)
	checkKeyOrder(t, got, n, keys)
	seen := map[int64]string{} // offset: who delivered it first
	twice := 0
	for _, r := range got {
		first, ok := seen[r.Offset]
		switch {
		case !ok:
			seen[r.Offset] = r.Member
		case first != "a" || r.Member != "b":
			t.Errorf("offset %d delivered by %s after %s: only b may deliver again what the killed a had delivered", r.Offset, r.Member, first)
		default:
			twice++
		}
	}
	t.Logf("%d records delivered, %d of them twice", len(got), twice)
}
