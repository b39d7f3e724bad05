package deliver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
)

// Config says where and how records are delivered. URL is required; the
// zero value of every other field means its default.
type Config struct {
	// URL is the endpoint. http:// or https://: each handler call POSTs
	// its records to it as JSON. grpc://host:port (plaintext) or
	// grpcs://host:port (TLS): each handler call calls
	// keyshare.deliver.v1.Delivery/Deliver (deliverpb/deliver.proto).
	URL string
	// MemberID is the member's id, sent with every request ("member").
	MemberID string
	// Timeout, when set, is each request's deadline, counted from
	// sending it; the endpoint is told it (HTTP: the Keyshare-Deadline
	// header; gRPC: the call's deadline) and must not apply the request
	// past it. Without an answer by then and DeadlineGrace after, the
	// request is the endpoint's trouble: it is sent again, as the next
	// attempt, and never before that. Default 0: no deadline; a request
	// is waited for as long as its connection lives (TCP keepalive,
	// HTTP/2 and gRPC pings find one that does not).
	Timeout time.Duration
	// TLS is the client's TLS configuration for an https:// or grpcs://
	// URL: the CAs
	// it trusts (RootCAs) and its certificate (Certificates). Default nil:
	// the system's CAs, no client certificate.
	TLS *tls.Config
	// Header is sent with every request, for example Authorization. Its
	// values are never logged. Content-Type is always application/json.
	// Over gRPC it is the call's metadata, names in lower case; a name
	// gRPC reserves (grpc-*, te, content-type) or cannot carry
	// is refused.
	Header http.Header
	// Backoff is the first wait after the endpoint could not answer; it
	// doubles up to MaxBackoff while the endpoint stays in trouble, each
	// wait drawn at random between half and all of it so that members do
	// not come back at once. Defaults 100 ms and 5 s.
	Backoff    time.Duration
	MaxBackoff time.Duration
	// MaxRetryAfter caps the wait a Retry-After header (on 429 or 503),
	// or over gRPC a grpc-retry-pushback-ms trailer, asks for; it replaces
	// the backoff's wait. Default 1 min.
	MaxRetryAfter time.Duration
	// Logger receives a line when the endpoint gets into trouble and when
	// it answers again. Default: none.
	Logger hclog.Logger
	// TracerProvider, if set, traces each request with a span of kind
	// Client (a child of the handler call's span when the consumer traces
	// too) and sends its W3C trace context in the request's traceparent
	// and tracestate headers (gRPC: metadata). Default nil: no span, no
	// header.
	TracerProvider trace.TracerProvider
	// KeyState, if set, gives the state of record m's key, which each
	// request then carries with the record ("state"), and which takes
	// the change the endpoint's answer makes to it for a record done.
	// It is called with the handler call's context; nil from it means the
	// member keeps no state for m (it goes without "state", and an answer
	// that changes it is a bad one). With package statestore:
	//
	//	KeyState: func(ctx context.Context, m *kafka.Message) deliver.KeyState {
	//		if k := statestore.KeyOf(ctx, m); k != nil {
	//			return k
	//		}
	//		return nil // not a nil *statestore.Key, which is a KeyState that is not nil
	//	}
	//
	// with the Handler or BatchHandler wrapped by the Store's. Default
	// nil: no record carries state (docs/delivery.md, "Keyed state").
	KeyState func(ctx context.Context, m *kafka.Message) KeyState

	// giveUpAtTimeout, for tests only, restores a behaviour that breaks a
	// slow key's order: a request is abandoned once Timeout has passed,
	// without telling the endpoint, and sent again at once with the same
	// attempt number.
	giveUpAtTimeout bool
}

// ErrConfig is the error of a bad Config.
var ErrConfig = errors.New("deliver: bad configuration")

// checkURL checks an endpoint's URL. Every error shows it redacted, so
// that no check echoes a password or a query, whichever refuses it.
func checkURL(raw string) error {
	shown := redactedURL(raw)
	if raw == "" {
		return fmt.Errorf("%w: URL is required (http://host:port/path, https://..., grpc://host:port or grpcs://...)", ErrConfig)
	}
	if !strings.Contains(raw, "://") {
		return fmt.Errorf("%w: URL %q has no scheme: add http:// or grpc:// (http://%s/path, grpc://%s)", ErrConfig, shown, hostOnly(shown), hostOnly(shown))
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // without the URL it names, unredacted
		}
		if strings.Contains(raw, "@") {
			// net/url quotes the part it cannot read, which may be a
			// piece of the password ("invalid port \":pw\""): not shown.
			return fmt.Errorf("%w: URL %q does not parse (its credentials not shown): send a token in an Authorization header, not in the URL", ErrConfig, shown)
		}
		return fmt.Errorf("%w: URL %q: %v", ErrConfig, shown, err)
	case u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "grpc" && u.Scheme != "grpcs":
		return fmt.Errorf("%w: URL %q: want an http://, https://, grpc:// or grpcs:// URL", ErrConfig, shown)
	case u.Host == "":
		return fmt.Errorf("%w: URL %q has no host", ErrConfig, shown)
	case u.User != nil:
		return fmt.Errorf("%w: URL %q carries credentials: send a token in an Authorization header instead", ErrConfig, shown)
	case !isGRPC(raw):
	case u.Port() == "":
		return fmt.Errorf("%w: URL %q has no port: want %s://host:port", ErrConfig, shown, u.Scheme)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%w: URL %q: a gRPC endpoint has no path or query: want %s://host:port", ErrConfig, shown, u.Scheme)
	}
	return nil
}

// redactedURL is raw as errors may show it: the password of any userinfo
// as xxxxx (all of it when there is no scheme), and no query or fragment.
// It works on the text, so that a URL that does not parse is redacted too.
func redactedURL(raw string) string {
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		scheme, rest = "", raw
	}
	// The userinfo ends at the last @ of all: a password may hold / ? or
	// #, so it is cut off before the query is.
	user := ""
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		name, _, hasPassword := strings.Cut(rest[:at], ":")
		switch {
		case !hasScheme || strings.ContainsAny(name, "/?#"):
			name = "xxxxx" // no user name to show: all of it may be secret
		case hasPassword:
			name += ":xxxxx"
		}
		user, rest = name+"@", rest[at+1:]
	}
	cut := ""
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		rest, cut = rest[:i], "?..."
	}
	if hasScheme {
		return scheme + "://" + user + rest + cut
	}
	return user + rest + cut
}

// hostOnly is a scheme-less URL's host and port, for an example.
func hostOnly(shown string) string {
	host, _, _ := strings.Cut(shown, "/")
	if at := strings.LastIndex(host, "@"); at >= 0 {
		host = host[at+1:]
	}
	return host
}

// withDefaults fills in the defaults and checks every field.
func (c Config) withDefaults() (Config, error) {
	if err := checkURL(c.URL); err != nil {
		return c, err
	}
	for name, d := range map[string]*time.Duration{"Timeout": &c.Timeout, "Backoff": &c.Backoff, "MaxBackoff": &c.MaxBackoff, "MaxRetryAfter": &c.MaxRetryAfter} {
		if *d < 0 {
			return c, fmt.Errorf("%w: %s %s: want a positive duration, or 0 for the default", ErrConfig, name, *d)
		}
	}
	if !utf8.ValidString(c.MemberID) {
		// Over gRPC such an id fails every call's encoding, which would
		// read as the endpoint's trouble; over HTTP it would be rewritten.
		return c, fmt.Errorf("%w: MemberID %q is not valid UTF-8: give the member a text id", ErrConfig, c.MemberID)
	}
	if c.Header.Get(DeadlineHeader) != "" {
		return c, fmt.Errorf("%w: header %s is the member's own: set Timeout instead", ErrConfig, DeadlineHeader)
	}
	if c.Backoff == 0 {
		c.Backoff = 100 * time.Millisecond
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = 5 * time.Second
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = time.Minute
	}
	if c.MaxBackoff < c.Backoff {
		return c, fmt.Errorf("%w: MaxBackoff %s is below Backoff %s", ErrConfig, c.MaxBackoff, c.Backoff)
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c, nil
}
