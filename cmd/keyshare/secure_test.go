package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/testutil"
)

// runEnv is run with extra environment variables.
func runEnv(t *testing.T, timeout time.Duration, env []string, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %v: %v", args, err)
	}
	return out.String(), code, took
}

// keyCount is the number of keys under prefix.
func keyCount(t *testing.T, cli *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// TestEtcdTLS: status and member reach an etcd that serves TLS and requires
// client certificates; an untrusted server certificate, a client
// certificate from another CA, an expired client certificate and a missing
// CA each fail fast with one error naming what failed, and nothing is
// written to etcd.
func TestEtcdTLS(t *testing.T) {
	testutil.RequireKfake(t, "etcd's TLS and client certificates: the broker plays no part in them; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	e := testutil.StartEtcdTLS(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	other := testutil.NewCA(t, "other-ca")
	now := time.Now()
	otherCert, otherKey := other.Issue(t, "intruder", false, now.Add(-time.Hour), now.Add(time.Hour))
	oldCert, oldKey := e.CA.Issue(t, "old", false, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	good := []string{"--etcd", e.Endpoint, "--etcd-cacert", e.CA.CertFile, "--etcd-cert", e.ClientCert, "--etcd-key", e.ClientKey}

	// The group does not exist yet: status reads etcd over TLS and says so.
	out, code := run(t, time.Minute, append([]string{"status", "--group", "g"}, good...)...)
	if code != 1 || !strings.Contains(out, `unknown group "g": no key under /keyshare/g/ in etcd`) {
		t.Fatalf("status over TLS: exit %d: %s", code, out)
	}
	member := append([]string{"member", "--group", "g", "--topic", "orders", "--brokers", k.Brokers}, deliverNowhere...)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"untrusted server", []string{"--etcd", e.Endpoint, "--etcd-cacert", other.CertFile, "--etcd-cert", e.ClientCert, "--etcd-key", e.ClientKey}, "etcd TLS handshake with 127.0.0.1"},
		{"client cert of another CA", []string{"--etcd", e.Endpoint, "--etcd-cacert", e.CA.CertFile, "--etcd-cert", otherCert, "--etcd-key", otherKey}, "refused the TLS client certificate"},
		{"expired client cert", []string{"--etcd", e.Endpoint, "--etcd-cacert", e.CA.CertFile, "--etcd-cert", oldCert, "--etcd-key", oldKey}, "expired at"},
		{"no client cert", []string{"--etcd", e.Endpoint, "--etcd-cacert", e.CA.CertFile}, "refused the TLS client certificate"},
		{"cert without key", []string{"--etcd", e.Endpoint, "--etcd-cert", e.ClientCert}, "--etcd-cert and --etcd-key go together"},
		{"plain text to a TLS server", []string{"--etcd", strings.TrimPrefix(e.Endpoint, "https://")}, "did not answer within"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code, took := runEnv(t, time.Minute, nil, append(member, tc.args...)...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d after %s, want an error containing %q:\n%s", code, took, tc.want, out)
			}
			if took > 25*time.Second {
				t.Fatalf("the error took %s (connect timeout is %s)", took, clientflags.ConnectTimeout)
			}
			t.Logf("%s: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
		})
	}
	if n := keyCount(t, e.Client(t), "/keyshare/"); n != 0 {
		t.Fatalf("%d keys written to etcd by members that could not connect", n)
	}
}

// startAuthEtcd starts etcd with authentication on: root, and user alice
// holding role group-a, which may read and write /keyshare/a/ only.
func startAuthEtcd(t *testing.T) (root *clientv3.Client, endpoint string) {
	cli, e := testutil.StartEtcd(t)
	root = testutil.EnableEtcdAuth(t, cli, "root-pw")
	testutil.GrantGroupRole(t, root, "group-a", "/keyshare/a/", "alice", "alice-pw")
	return root, e.Endpoints[0]
}

// TestEtcdAuthLeastPrivilege: a member of group a whose etcd user holds only
// group a's role (readwrite on /keyshare/a/) joins, leads, handles and
// commits; the same user is refused on group b with an error naming the
// prefix; a wrong password and a missing one are refused by name; nothing is
// written outside /keyshare/a/.
func TestEtcdAuthLeastPrivilege(t *testing.T) {
	testutil.RequireKfake(t, "etcd's users and roles: the broker plays no part in them; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	root, ep := startAuthEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 2})
	if out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--topic", "orders", "--count", "200", "--keys", "10", "--quiet"); code != 0 {
		t.Fatalf("produce: %s", out)
	}
	args := func(group string) []string {
		return []string{"member", "--brokers", k.Brokers, "--etcd", ep, "--group", group, "--topic", "orders", "--ttl", "2s", "--etcd-user", "alice"}
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"wrong password", []string{clientflags.EtcdPasswordEnv + "=nope"}, args("a"), `refused the credentials of user "alice"`},
		{"no password", nil, args("a"), "--etcd-user alice needs a password"},
		{"other group", []string{clientflags.EtcdPasswordEnv + "=alice-pw"}, args("b"), `etcd user "alice" may not read /keyshare/b/`},
		{"user:password", nil, append(args("a")[:len(args("a"))-1], "alice:alice-pw"), "takes a name only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code, took := runEnv(t, time.Minute, tc.env, append(tc.args, deliverNowhere...)...)
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d after %s, want an error containing %q:\n%s", code, took, tc.want, out)
			}
			if strings.Contains(out, "alice-pw") {
				t.Fatalf("the output shows the password:\n%s", out)
			}
			t.Logf("%s: %s", took.Round(time.Millisecond), strings.TrimSpace(out))
		})
	}
	if n := keyCount(t, root, "/keyshare/"); n != 0 {
		t.Fatalf("%d keys written by members that were refused", n)
	}

	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("alice-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := exec.Command(benchBin, append(args("a"), "--etcd-password-file", pwFile, "--id", "m1")...)
	var mout bytes.Buffer
	m.Stdout, m.Stderr = &mout, &mout
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
	testutil.WaitFor(t, "group a's commits to reach the end", 60*time.Second, func() bool {
		c := testutil.Committed(t, k.Brokers, "a", "orders", 2)
		return c[0]+c[1] == 200
	})
	// status with the same least-privilege user.
	out, code, _ := runEnv(t, time.Minute, []string{clientflags.EtcdPasswordEnv + "=alice-pw"}, "status", "--etcd", ep, "--etcd-user", "alice", "--group", "a")
	if code != 0 || !strings.Contains(out, "leader m1") {
		t.Fatalf("status as alice: exit %d:\n%s", code, out)
	}
	_ = m.Process.Signal(os.Interrupt)
	if err := m.Wait(); err != nil {
		t.Fatalf("member did not leave cleanly: %v\n%s", err, mout.String())
	}
	resp, err := root.Get(t.Context(), "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), "/keyshare/a/") {
			t.Errorf("key %q written outside group a's prefix", kv.Key)
		}
	}
	if len(resp.Kvs) == 0 {
		t.Fatal("group a wrote nothing")
	}
}

// saslKafka starts kfake with SASL: a PLAIN user and a SCRAM-SHA-256 user.
func saslKafka(t *testing.T, topics map[string]int32, plainPw, scramPw string) *testutil.Kafka {
	return testutil.StartKafka(t, topics, kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "keyshare", plainPw), kfake.Superuser("SCRAM-SHA-256", "scrammer", scramPw))
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSecretsNeverLeak: a member on a SASL PLAIN cluster (properties from
// --kafka-config, librdkafka debug on) and an auth-enabled etcd, at trace
// level, with a dead-letter topic that every record goes to: the
// dead-letter producer authenticates too (the records arrive), and neither
// the Kafka nor the etcd password appears in the member's stdout and
// stderr, its /metrics, status (table and JSON), or the errors of a wrong
// password. Producing uses SCRAM-SHA-256.
func TestSecretsNeverLeak(t *testing.T) {
	const kafkaSecret, scramSecret, etcdSecret = "KAFKA-s3cret-PLAIN", "KAFKA-s3cret-SCRAM", "ETCD-s3cret-alice"
	cli, e := testutil.StartEtcd(t)
	root := testutil.EnableEtcdAuth(t, cli, "root-pw")
	testutil.GrantGroupRole(t, root, "group-g", "/keyshare/g/", "alice", etcdSecret)
	k := saslKafka(t, map[string]int32{"orders": 2, "dead": 1}, kafkaSecret, scramSecret)
	plain := writeFile(t, "plain.properties", "# keyshare's member\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=keyshare\nsasl.password="+kafkaSecret+"\n")
	scram := writeFile(t, "scram.properties", "security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=SCRAM-SHA-256\nsasl.username=scrammer\nsasl.password="+scramSecret+"\n")

	out, code := run(t, time.Minute, "produce", "--brokers", k.Brokers, "--kafka-config", scram, "--topic", "orders", "--count", "50", "--keys", "5", "--quiet")
	if code != 0 || !strings.Contains(out, "produced 50 records") {
		t.Fatalf("produce with SCRAM: exit %d: %s", code, out)
	}
	metrics := freePort(t)
	env := []string{clientflags.EtcdPasswordEnv + "=" + etcdSecret}
	margs := []string{"member", "--brokers", k.Brokers, "--kafka-config", plain, "-X", "debug=security,broker,conf,protocol", "--etcd", e.Endpoints[0],
		"--etcd-user", "alice", "--group", "g", "--topic", "orders", "--id", "m1", "--log-level", "trace", "--fail-rate", "1", "--dlq", "dead",
		"--metrics-addr", metrics, "--ttl", "2s"}
	m := exec.Command(benchBin, margs...)
	m.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	m.Stdout, m.Stderr = &stdout, &stderr
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })

	dead := func() int64 {
		cm := kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "probe", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
			"sasl.username": "keyshare", "sasl.password": kafkaSecret, "log_level": 0}
		c, err := kafka.NewConsumer(&cm)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, hi, err := c.QueryWatermarkOffsets("dead", 0, 5000)
		if err != nil {
			return -1
		}
		return hi
	}
	testutil.WaitFor(t, "all 50 records in the dead-letter topic", 90*time.Second, func() bool { return dead() == 50 })
	var everything []string
	for _, args := range [][]string{
		{"status", "--etcd", e.Endpoints[0], "--etcd-user", "alice", "--group", "g", "--brokers", k.Brokers, "--kafka-config", plain},
		{"status", "--etcd", e.Endpoints[0], "--etcd-user", "alice", "--group", "g", "--brokers", k.Brokers, "--kafka-config", plain, "--json"},
	} {
		out, code, _ := runEnv(t, time.Minute, env, args...)
		if code != 0 || !strings.Contains(out, "m1") {
			t.Fatalf("status: exit %d:\n%s", code, out)
		}
		everything = append(everything, out)
	}
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	everything = append(everything, string(body))
	// Wrong passwords: the errors name the failure, not the secret.
	bad := writeFile(t, "bad.properties", "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=keyshare\nsasl.password=wrong-"+kafkaSecret+"\n")
	out, code, took := runEnv(t, time.Minute, env, "member", "--brokers", k.Brokers, "--kafka-config", bad, "--etcd", e.Endpoints[0], "--etcd-user", "alice",
		"--group", "g", "--topic", "orders", "--log-level", "trace", "--deliver", "http://127.0.0.1:1/")
	if code == 0 || !strings.Contains(out, "refused the credentials") {
		t.Fatalf("wrong SASL password: exit %d after %s:\n%s", code, took, out)
	}
	everything = append(everything, out)
	out, code, _ = runEnv(t, time.Minute, []string{clientflags.EtcdPasswordEnv + "=wrong-" + etcdSecret}, "status", "--etcd", e.Endpoints[0], "--etcd-user", "alice", "--group", "g")
	if code == 0 || !strings.Contains(out, "refused the credentials") {
		t.Fatalf("wrong etcd password: exit %d:\n%s", code, out)
	}
	everything = append(everything, out)

	_ = m.Process.Signal(os.Interrupt)
	_ = m.Wait()
	everything = append(everything, stdout.String(), stderr.String())
	if !strings.Contains(stderr.String(), "sasl") && !strings.Contains(stderr.String(), "SASL") {
		t.Fatalf("the member's librdkafka debug log says nothing about SASL; is debug on?\n%.3000s", stderr.String())
	}
	for i, s := range everything {
		for _, secret := range []string{kafkaSecret, scramSecret, etcdSecret} {
			if strings.Contains(s, secret) {
				j := strings.Index(s, secret)
				t.Errorf("output %d shows secret %q: …%s…", i, secret, s[max(0, j-200):min(len(s), j+100)])
			}
		}
	}
	t.Logf("searched %d outputs, %d bytes of member stderr", len(everything), stderr.Len())
}

// TestKafkaConfigErrors: an unknown librdkafka property is refused naming
// the file and line or the flag; a malformed line names its line only.
func TestKafkaConfigErrors(t *testing.T) {
	testutil.ParallelOnKfake(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	f := writeFile(t, "k.properties", "# comment\n\nclient.id=me\nno.such.property=1\n")
	badLine := writeFile(t, "bad.properties", "client.id=me\nsasl.password\n")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"produce", "--brokers", k.Brokers, "--topic", "orders", "--kafka-config", f}, 1, "no.such.property\" (set by --kafka-config " + f + " line 4)"},
		{[]string{"produce", "--brokers", k.Brokers, "--topic", "orders", "-X", "bogus.prop=1"}, 1, "(set by -X bogus.prop)"},
		{[]string{"member", "--brokers", k.Brokers, "--group", "g", "--topic", "orders", "-X", "bogus.prop=1", "--deliver", "http://127.0.0.1:1/"}, 1, "(set by -X bogus.prop)"},
		{[]string{"status", "--group", "g", "--kafka-config", badLine}, 2, "line 2: want key=value"},
		{[]string{"produce", "--topic", "orders", "-X", "novalue"}, 2, "-X novalue: want prop=value"},
		{[]string{"produce", "--topic", "orders", "--brokers", "a:1", "-X", "bootstrap.servers=b:1"}, 2, "--brokers a:1 and bootstrap.servers from -X bootstrap.servers differ"},
	} {
		t.Run(strings.Join(tc.args[:1], " ")+fmt.Sprint(len(tc.args)), func(t *testing.T) {
			out, code := run(t, time.Minute, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d (want %d), output:\n%s\nwant it to contain %q", code, tc.code, out, tc.want)
			}
		})
	}
}

// TestControlSequencesEscaped: a producer writes a record whose key is the
// terminal sequence "clear screen"; the member's handler keeps failing on
// it. The member's logs, the stuck/ report and keyshare status show the
// key Go-quoted, and no ESC byte reaches the operator's terminal.
func TestControlSequencesEscaped(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	const evil = "\x1b[2J"
	recs := append([]testutil.Record{{Key: []byte(evil), Value: []byte("v")}}, testutil.KeyedRecords(20, 4)...)
	testutil.Produce(t, k.Brokers, "orders", recs)
	m := exec.Command(benchBin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "m1",
		"--fail-rate", "1", "--stuck-timeout", "1s", "--log-level", "debug", "--ttl", "2s", "--drain-timeout", "1s")
	var mout bytes.Buffer
	m.Stdout, m.Stderr = &mout, &mout
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Process.Kill(); _ = m.Wait() })
	var status string
	testutil.WaitFor(t, "status to name the stuck key", 60*time.Second, func() bool {
		status, _ = run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--brokers", k.Brokers, "--group", "g")
		return strings.Contains(status, `by key "\x1b[2J"`) && strings.Contains(status, "failed attempts")
	})
	js, _ := run(t, 30*time.Second, "status", "--etcd", e.Endpoints[0], "--group", "g", "--json")
	_ = m.Process.Signal(os.Interrupt)
	_ = m.Wait()
	t.Log(status)
	if !strings.Contains(mout.String(), `key="\"\x1b[2J\""`) {
		t.Errorf("the member's log does not show the key escaped:\n%.3000s", mout.String())
	}
	for name, s := range map[string]string{"status": status, "status --json": js, "member log": mout.String()} {
		if strings.Contains(s, "\x1b") {
			t.Errorf("%s contains a raw ESC byte", name)
		}
	}
}
