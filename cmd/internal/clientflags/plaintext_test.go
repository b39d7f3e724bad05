package clientflags

import (
	"bytes"
	"strings"
	"testing"
)

// TestEtcdPasswordOverPlainConnectionWarns: a password for etcd over
// connections without TLS gets one warning, which names the endpoints and
// what to do but not the password; over https:// endpoints, or with no
// password, nothing is said.
func TestEtcdPasswordOverPlainConnectionWarns(t *testing.T) {
	var warned bytes.Buffer
	old := warnings
	warnings = &warned
	t.Cleanup(func() { warnings = old })

	t.Setenv(EtcdPasswordEnv, "ETCD-s3cret")
	f := Etcd{endpoints: "10.0.0.5:2379", user: "alice"}
	for range 2 {
		if _, err := f.Config(); err != nil {
			t.Fatal(err)
		}
	}
	got := warned.String()
	if strings.Count(got, "warning") != 1 || !strings.Contains(got, "10.0.0.5:2379") || !strings.Contains(got, "--etcd-cacert") || strings.Contains(got, "ETCD-s3cret") {
		t.Errorf("warnings after two Configs over plain etcd:\n%q\nwant one, naming the endpoints and --etcd-cacert, without the password", got)
	}

	warned.Reset()
	t.Setenv(EtcdPasswordEnv, "ETCD-s3cret")
	for _, f := range []Etcd{{endpoints: "https://10.0.0.5:2379", user: "alice"}, {endpoints: "10.0.0.5:2379"}} {
		if _, err := f.Config(); err != nil {
			t.Fatal(err)
		}
	}
	if warned.Len() != 0 {
		t.Errorf("warned over https:// or without a password: %q", warned.String())
	}
}
