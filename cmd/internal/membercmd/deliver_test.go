package membercmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestMemberRefusesBadDeliverFlags: each --deliver setting that can be
// wrong is refused before any network as a usage error naming its flag,
// and no error shows the token or a header's value.
func TestMemberRefusesBadDeliverFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "tok en-s3cret"
	spaced := write("spaced-token", secret+"\n")
	empty := write("empty", "\n")
	headers := write("headers", "X-Tenant: blue\nAuthorization: Basic s3cret\n")
	badHeader := write("bad-header", "X-Tenant blue-s3cret\n")
	setsType := write("sets-type", "Content-Type: text/plain\n")
	notPEM := write("not-pem", "hello")
	ca := testutil.NewCA(t, "deliver")
	cert, key := ca.Issue(t, "client", false, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	for _, tc := range []struct {
		args []string
		want string // the error's start
	}{
		{[]string{"--deliver", "ftp://sink/"}, `--deliver "ftp://sink/": want an http://, https://, grpc:// or grpcs:// URL`},
		{[]string{"--deliver", "sink:8080"}, `--deliver "sink:8080" has no scheme: add http:// or grpc:// (http://sink:8080/path, grpc://sink:8080)`},
		{[]string{"--deliver", "127.0.0.1:8080"}, `--deliver "127.0.0.1:8080" has no scheme: add http:// or grpc://`},
		{[]string{"--deliver", "htp://user:s3cret@sink/"}, `--deliver "htp://user:xxxxx@sink/": want an http://`},
		{[]string{"--deliver", "http://user:pw@sink/"}, `--deliver "http://user:xxxxx@sink/" carries credentials`},
		{[]string{"--deliver-timeout", "5s"}, "--deliver-timeout needs --deliver URL"},
		{[]string{"--deliver-token-file", spaced}, "--deliver-token-file needs --deliver URL"},
		{[]string{"--state"}, "--state needs --deliver URL"},
		{[]string{"--deliver", "http://sink/", "--state-dir", dir}, "--state-dir needs --state"},
		{[]string{"--deliver", "http://sink/", "--deliver-timeout", "-1s"}, "--deliver-timeout -1s: want a positive duration"},
		{[]string{"--deliver", "http://sink/", "--deliver-token-file", spaced}, "--deliver-token-file " + spaced + ": the token holds spaces"},
		{[]string{"--deliver", "http://sink/", "--deliver-token-file", empty}, "--deliver-token-file " + empty + ": the first line is empty"},
		{[]string{"--deliver", "http://sink/", "--deliver-token-file", filepath.Join(dir, "none")}, "--deliver-token-file: open"},
		{[]string{"--deliver", "http://sink/", "--deliver-header-file", badHeader}, "--deliver-header-file " + badHeader + " line 1: want \"Name: value\""},
		{[]string{"--deliver", "http://sink/", "--deliver-header-file", setsType}, "--deliver-header-file " + setsType + " line 1: the member sets Content-Type itself"},
		{[]string{"--deliver", "http://sink/", "--deliver-header-file", headers, "--deliver-token-file", write("token", "abc\n")}, "--deliver-token-file and an Authorization line"},
		{[]string{"--deliver", "https://sink/", "--deliver-cert", cert}, "--deliver-cert and --deliver-key go together"},
		{[]string{"--deliver", "https://sink/", "--deliver-ca", notPEM}, "--deliver-ca " + notPEM + " holds no PEM certificate"},
		{[]string{"--deliver", "http://sink/", "--deliver-cert", cert, "--deliver-key", key}, "--deliver-ca, --deliver-cert and --deliver-key need an https:// or grpcs:// --deliver URL"},
		{[]string{"--deliver", "http://sink/r?key=s3cret", "--deliver-ca", ca.CertFile}, "--deliver-ca, --deliver-cert and --deliver-key need an https:// or grpcs:// --deliver URL, not http://sink (path and query not shown)"},
	} {
		args := append([]string{"--group", "g", "--topic", "t"}, tc.args...)
		_, err := (&Command{}).parse(args)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error starting %q", tc.args, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: the error %q shows a secret", tc.args, err)
		}
	}
	c := &Command{}
	if _, err := c.parse([]string{"--group", "g", "--topic", "t", "--deliver", "https://sink/", "--deliver-ca", ca.CertFile,
		"--deliver-cert", cert, "--deliver-key", key, "--deliver-header-file", write("ok-headers", "# tenant\nX-Tenant: blue\n\n"),
		"--deliver-token-file", write("ok-token", "abc123\n")}); err != nil {
		t.Fatalf("good --deliver flags refused: %v", err)
	}
	d := c.deliverCfg
	if d.Header.Get("Authorization") != "Bearer abc123" || d.Header.Get("X-Tenant") != "blue" || d.TLS == nil || d.TLS.RootCAs == nil || len(d.TLS.Certificates) != 1 {
		t.Errorf("endpoint configuration from good flags: headers %v, TLS %v", d.Header, d.TLS != nil)
	}
}
