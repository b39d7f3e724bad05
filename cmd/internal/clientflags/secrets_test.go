package clientflags

import (
	"os"
	"os/exec"
	"strings"
	"testing"
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
		if !IsSecretKey(k) {
			t.Errorf("%s is not taken for a secret", k)
		}
	}
	for _, k := range []string{"bootstrap.servers", "client.id", "security.protocol", "sasl.mechanism", "ssl.ca.location",
		"ssl.certificate.location", "ssl.certificate.pem", "sasl.oauthbearer.client.id", "sasl.oauthbearer.token.endpoint.url"} {
		if IsSecretKey(k) {
			t.Errorf("%s is taken for a secret", k)
		}
	}
}

// TestEtcdPasswordLeavesEnvironment: once read, the etcd password is gone
// from the environment, so a process the member starts does not inherit
// it; the flags still know it.
func TestEtcdPasswordLeavesEnvironment(t *testing.T) {
	t.Setenv(EtcdPasswordEnv, "ETCD-s3cret")
	f := Etcd{user: "alice"}
	for range 2 {
		if pw, err := f.password(); err != nil || pw != "ETCD-s3cret" {
			t.Fatalf("password() = %q, %v", pw, err)
		}
	}
	if _, ok := os.LookupEnv(EtcdPasswordEnv); ok {
		t.Errorf("$%s is still set", EtcdPasswordEnv)
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "ETCD-s3cret") {
		t.Errorf("a child process inherits the etcd password")
	}
}
