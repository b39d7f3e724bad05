package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/testutil"
)

// TestMemberStartInterrupted: Ctrl-C two seconds into the start of a
// member whose brokers do not answer ends it at once, exit 130 and no
// error text: it does not wait out the attempt's timeout (clientflags.ConnectTimeout)
// first.
func TestMemberStartInterrupted(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	m := exec.Command(bin, "member", "--brokers", freePort(t), "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "m1", "--deliver", "http://127.0.0.1:1/")
	var out bytes.Buffer
	m.Stdout, m.Stderr = &out, &out
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	t.Cleanup(func() { _ = m.Process.Kill() })
	time.Sleep(2 * time.Second) // the member is waiting for the brokers
	sent := time.Now()
	_ = m.Process.Signal(os.Interrupt)
	err := m.Wait()
	took := time.Since(sent)
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 130 && code != 0 {
		t.Errorf("exit %d after Ctrl-C, want 130 (or 0)", code)
	}
	if strings.Contains(out.String(), "keyshare member:") {
		t.Errorf("Ctrl-C printed an error:\n%s", out.String())
	}
	if time.Since(started) >= clientflags.ConnectTimeout {
		t.Errorf("the member took %s to stop after Ctrl-C: it waited out the %s attempt", took.Round(time.Millisecond), clientflags.ConnectTimeout)
	}
	t.Logf("exit %d, %s after Ctrl-C; output:\n%s", code, took.Round(time.Millisecond), out.String())
}

// TestMemberRefusalReportedAtOnce: a member whose SASL password the
// brokers refuse exits 1 saying so when the refusal arrives, not when the
// attempt to read metadata (clientflags.ConnectTimeout) times out.
func TestMemberRefusalReportedAtOnce(t *testing.T) {
	k := saslKafka(t, map[string]int32{"orders": 1}, "plain-right", "scram-right")
	bad := writeFile(t, "bad.properties", "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=keyshare\nsasl.password=plain-wrong\n")
	out, code, took := runEnv(t, time.Minute, nil, "member", "--brokers", k.Brokers, "--kafka-config", bad, "--etcd", freePort(t), "--group", "g", "--topic", "orders", "--deliver", "http://127.0.0.1:1/")
	if code != 1 || !strings.Contains(out, "refused the credentials") {
		t.Fatalf("exit %d after %s, want 1 and the refusal:\n%s", code, took, out)
	}
	if took >= clientflags.ConnectTimeout {
		t.Errorf("the refusal was reported after %s: the member waited out the %s attempt", took.Round(time.Millisecond), clientflags.ConnectTimeout)
	}
}
