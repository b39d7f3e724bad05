package deliver

import (
	"errors"
	"strings"
	"testing"
)

// TestConfigErrorsShowNoSecret: every URL refused names what is wrong
// and what to do, and never shows a password or the query, whichever
// check refuses it.
func TestConfigErrorsShowNoSecret(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url  string
		want string
	}{
		{"htp://user:s3cret@sink/records", `URL "htp://user:xxxxx@sink/records": want an http://, https://, grpc:// or grpcs:// URL`},
		{"http://user:s3cret@/records", `URL "http://user:xxxxx@/records" has no host`},
		{"http://user:s3cret@sink:80x/records", `URL "http://user:xxxxx@sink:80x/records" does not parse (its credentials not shown)`},
		{"http://user:s3cret@sink/records", `URL "http://user:xxxxx@sink/records" carries credentials`},
		{"grpc://user:s3cret@sink", `URL "grpc://user:xxxxx@sink"`},
		{"http://sink:80x/records?api_key=s3cret", `URL "http://sink:80x/records?...": invalid port`},
		{"htp://sink/records?api_key=s3cret", `URL "htp://sink/records?...": want an http://`},
		{"user:s3cret@sink:8080", `URL "xxxxx@sink:8080" has no scheme: add http:// or grpc://`},
		{"127.0.0.1:8080", `URL "127.0.0.1:8080" has no scheme: add http:// or grpc:// (http://127.0.0.1:8080/path, grpc://127.0.0.1:8080)`},
		{"sink:8080/records", `URL "sink:8080/records" has no scheme: add http:// or grpc://`},
		{"htp://user:s3/cret@sink/records", `URL "htp://user:xxxxx@sink/records"`},
		{"http://user:s3?cret@sink/records", `URL "http://user:xxxxx@sink/records"`},
		{"http://user:s3#cret@sink/records", `URL "http://user:xxxxx@sink/records"`},
	} {
		_, err := New(Config{URL: c.url})
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "s3") {
			t.Errorf("New(%s) = %v, want ErrConfig saying %s, and no secret", c.url, err, c.want)
		}
	}
}

// TestMemberIDMustBeText: an id that is not valid UTF-8 is refused when
// the Endpoint is made, not found out at every call (over gRPC it cannot
// be encoded, which would read as the endpoint's trouble).
func TestMemberIDMustBeText(t *testing.T) {
	t.Parallel()
	_, err := New(Config{URL: "grpc://127.0.0.1:9000", MemberID: "m-\xff"})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "MemberID") {
		t.Fatalf("New with MemberID %q = %v, want ErrConfig naming MemberID", "m-\xff", err)
	}
	if _, err := New(Config{URL: "grpc://127.0.0.1:9000", MemberID: "m-ü"}); err != nil {
		t.Fatalf("New with a UTF-8 MemberID: %v", err)
	}
}
