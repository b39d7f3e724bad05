package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecretFiles: a member given a --kafka-config with a password and an
// --etcd-password-file that other users can read warns about each, and a
// secret in -X is warned about; the --record and --audit files it creates
// are readable by its user only. (The member stops at an unknown
// property, before it contacts any server.) A --kafka-config without a
// secret gets no warning.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	kc := write("kafka.properties", "sasl.username=u\nsasl.password=p\n", 0o644)
	plain := write("plain.properties", "client.id=me\n", 0o644)
	pw := write("etcd.pw", "p\n", 0o640)
	rec, audit := filepath.Join(dir, "records.jsonl"), filepath.Join(dir, "audit.jsonl")
	out, code := runBench(t, time.Minute, "member", "--group", "g", "--topic", "orders", "--id", "m1", "--brokers", "127.0.0.1:1",
		"--kafka-config", kc, "--etcd-user", "alice", "--etcd-password-file", pw, "--record", rec, "--audit", audit,
		"-X", "sasl.oauthbearer.assertion.private.key.passphrase=x", "-X", "bogus.prop=1")
	if code != 1 || !strings.Contains(out, "(set by -X bogus.prop)") {
		t.Fatalf("member: exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"--kafka-config " + kc + " is open to other users (mode 0644)",
		"--etcd-password-file " + pw + " is open to other users (mode 0640)",
		"-X sasl.oauthbearer.assertion.private.key.passphrase puts a secret on the command line",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no warning %q in:\n%s", want, out)
		}
	}
	for _, p := range []string{rec, audit} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s created with mode %#o, want 0600", filepath.Base(p), st.Mode().Perm())
		}
	}
	out, _ = run(t, time.Minute, "produce", "--topic", "orders", "--brokers", "127.0.0.1:1", "--kafka-config", plain, "-X", "bogus.prop=1")
	if strings.Contains(out, "warning") {
		t.Errorf("a --kafka-config without secrets gets a warning:\n%s", out)
	}
}
