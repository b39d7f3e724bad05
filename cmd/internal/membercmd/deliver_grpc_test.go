package membercmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyshare/keyshare/testutil"
)

// TestMemberGRPCDeliverFlags: a grpcs:// URL takes the TLS flags, a
// grpc:// one refuses them, and a header gRPC metadata cannot carry is a
// usage error naming it, not its value.
func TestMemberGRPCDeliverFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testutil.NewCA(t, "deliver")
	badName := filepath.Join(dir, "headers")
	if err := os.WriteFile(badName, []byte("X-Api!Key: s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--deliver", "grpc://sink:9000", "--deliver-ca", ca.CertFile}, "--deliver-ca, --deliver-cert and --deliver-key need an https:// or grpcs:// --deliver URL"},
		{[]string{"--deliver", "grpc://sink"}, `--deliver "grpc://sink" has no port: want grpc://host:port`},
		{[]string{"--deliver", "grpc://sink:9000", "--deliver-header-file", badName}, `--deliver-header-file header "X-Api!key" cannot be gRPC metadata: a name takes only letters`},
	} {
		_, err := (&Command{}).parse(append([]string{"--group", "g", "--topic", "t"}, tc.args...))
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: got %v, want an error starting %q, no secret", tc.args, err, tc.want)
		}
	}
	c := &Command{}
	if _, err := c.parse([]string{"--group", "g", "--topic", "t", "--deliver", "grpcs://sink:9443", "--deliver-ca", ca.CertFile}); err != nil {
		t.Fatalf("grpcs:// with --deliver-ca refused: %v", err)
	}
	if c.deliverCfg.TLS == nil || c.deliverCfg.TLS.RootCAs == nil {
		t.Error("grpcs:// with --deliver-ca: no CA in the endpoint's TLS configuration")
	}
}
