package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecretKeys: every property librdkafka marks sensitive (_RK_SENSITIVE
// in src/rdkafka_conf.c, librdkafka 2.15, with its alias) gets the -X
// warning; ordinary properties do not.
func TestSecretKeys(t *testing.T) {
	for _, k := range []string{
		"ssl.key.location", "ssl.key.password", "ssl.key.pem", "ssl_key", "ssl.ca.pem", "ssl.keystore.password",
		"sasl.username", "sasl.password", "sasl.oauthbearer.config", "sasl.oauthbearer.client.secret",
		"sasl.oauthbearer.client.credentials.client.secret", "sasl.oauthbearer.assertion.private.key.file",
		"sasl.oauthbearer.assertion.private.key.passphrase", "sasl.oauthbearer.assertion.private.key.pem",
		"sasl.jaas.config",
	} {
		if !isSecretKey(k) {
			t.Errorf("%s is not taken for a secret", k)
		}
	}
	for _, k := range []string{"bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "ssl.ca.location",
		"ssl.certificate.location", "ssl.certificate.pem", "sasl.oauthbearer.client.id", "sasl.oauthbearer.token.endpoint.url"} {
		if isSecretKey(k) {
			t.Errorf("%s is taken for a secret", k)
		}
	}
}

// TestEtcdPasswordLeavesEnvironment: once read, the etcd password is gone
// from the environment, so a process the member starts does not inherit
// it; the flags still know it.
func TestEtcdPasswordLeavesEnvironment(t *testing.T) {
	t.Setenv(etcdPasswordEnv, "ETCD-s3cret")
	f := etcdFlags{user: "alice"}
	for range 2 {
		if pw, err := f.password(); err != nil || pw != "ETCD-s3cret" {
			t.Fatalf("password() = %q, %v", pw, err)
		}
	}
	if _, ok := os.LookupEnv(etcdPasswordEnv); ok {
		t.Errorf("$%s is still set", etcdPasswordEnv)
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "ETCD-s3cret") {
		t.Errorf("a child process inherits the etcd password")
	}
}

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
	out, code := run(t, time.Minute, "member", "--group", "g", "--topic", "orders", "--id", "m1", "--brokers", "127.0.0.1:1",
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
