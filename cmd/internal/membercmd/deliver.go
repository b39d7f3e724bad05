package membercmd

// --deliver: the member hands each record (or batch) to an HTTP(S) or
// gRPC endpoint through package deliver.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/deliver"
	"github.com/keyshare/keyshare/statestore"
)

// deliverFlags say where records go and how the member reaches it.
type deliverFlags struct {
	url, ca, cert, key, tokenFile, headerFile string
	timeout                                   time.Duration
	// state: keep each key's state for the endpoint (state.go), on
	// disk in stateDir if set.
	state    bool
	stateDir string
}

func (f *deliverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "deliver", "", "deliver each record (each batch with --batch-size) to this http:// or https:// endpoint as JSON, or grpc://host:port or grpcs://host:port by gRPC (docs/delivery.md)")
	fs.DurationVar(&f.timeout, "deliver-timeout", 0, "with --deliver: each request's deadline, told to the endpoint, which must not apply it later; unanswered, it is sent again only 2s after it (0: none, a request is waited for while its connection lives)")
	fs.StringVar(&f.ca, "deliver-ca", "", "with an https:// or grpcs:// --deliver: verify the endpoint's certificate with this CA bundle (PEM) instead of the system's")
	fs.StringVar(&f.cert, "deliver-cert", "", "with an https:// or grpcs:// --deliver: client certificate (PEM), with --deliver-key")
	fs.StringVar(&f.key, "deliver-key", "", "with an https:// or grpcs:// --deliver: the client certificate's private key (PEM)")
	fs.StringVar(&f.tokenFile, "deliver-token-file", "", "with --deliver: send the first line of this file as a bearer token (Authorization: Bearer ...; gRPC metadata authorization)")
	fs.StringVar(&f.headerFile, "deliver-header-file", "", "with --deliver: send the headers in this file (one \"Name: value\" per line) with every request (gRPC: as metadata)")
	fs.BoolVar(&f.state, "state", false, "with --deliver: keep each key's state for the endpoint, in a compacted changelog topic <group>-<topic>-state: each record goes with its key's state and the answer gives the new one; a record its key has applied is skipped (docs/delivery.md)")
	fs.StringVar(&f.stateDir, "state-dir", "", "with --state: keep the keyed state on this member's disk in this directory (Pebble) instead of in memory, for state larger than memory; a range this member held before restores from its copy there and the changelog's tail (docs/state.md). One directory per member")
}

// config checks the flags and reads their files, before any network; a
// problem is a usage error naming its flag. It never prints a token or a
// header's value. The caller sets MemberID and Logger.
func (f *deliverFlags) config() (deliver.Config, error) {
	if f.stateDir != "" && !f.state {
		return deliver.Config{}, cli.Usage(errors.New("--state-dir needs --state"))
	}
	if f.url == "" {
		for flag, set := range map[string]bool{"--deliver-timeout": f.timeout != 0, "--deliver-ca": f.ca != "",
			"--deliver-cert": f.cert != "", "--deliver-key": f.key != "", "--deliver-token-file": f.tokenFile != "", "--deliver-header-file": f.headerFile != "", "--state": f.state} {
			if set {
				return deliver.Config{}, cli.Usage(fmt.Errorf("%s needs --deliver URL", flag))
			}
		}
		return deliver.Config{}, nil
	}
	if _, err := deliver.New(deliver.Config{URL: f.url}); err != nil { // checks the URL; makes no request
		msg := strings.TrimPrefix(err.Error(), deliver.ErrConfig.Error()+": ")
		return deliver.Config{}, cli.Usage(errors.New("--deliver " + strings.TrimPrefix(msg, "URL ")))
	}
	if f.timeout < 0 {
		return deliver.Config{}, cli.Usage(fmt.Errorf("--deliver-timeout %s: want a positive duration, e.g. 30s, or 0 for no deadline", f.timeout))
	}
	cfg := deliver.Config{URL: f.url, Timeout: f.timeout, Header: http.Header{}}
	tlsCfg, err := f.tls()
	if err != nil {
		return cfg, cli.Usage(err)
	}
	if u, _ := url.Parse(f.url); tlsCfg != nil && u.Scheme != "https" && u.Scheme != "grpcs" {
		// The scheme and host only: the URL's query may hold a secret.
		return cfg, cli.Usage(fmt.Errorf("--deliver-ca, --deliver-cert and --deliver-key need an https:// or grpcs:// --deliver URL, not %s://%s (path and query not shown)", u.Scheme, u.Host))
	}
	cfg.TLS = tlsCfg
	if f.headerFile != "" {
		if err := readHeaderFile(f.headerFile, cfg.Header); err != nil {
			return cfg, cli.Usage(err)
		}
	}
	if f.tokenFile != "" {
		if cfg.Header.Get("Authorization") != "" {
			return cfg, cli.Usage(errors.New("--deliver-token-file and an Authorization line in --deliver-header-file both set Authorization: keep one"))
		}
		token, err := readToken(f.tokenFile)
		if err != nil {
			return cfg, cli.Usage(err)
		}
		cfg.Header.Set("Authorization", "Bearer "+token)
	}
	ep, err := deliver.New(cfg) // a gRPC endpoint takes only the headers gRPC metadata can carry
	if err != nil {
		return cfg, cli.Usage(errors.New("--deliver-header-file " + strings.TrimPrefix(err.Error(), deliver.ErrConfig.Error()+": ")))
	}
	ep.Close()
	return cfg, nil
}

// tls is the client's TLS configuration, nil when no flag asks for one.
func (f *deliverFlags) tls() (*tls.Config, error) {
	if f.ca == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	if (f.cert == "") != (f.key == "") {
		return nil, errors.New("--deliver-cert and --deliver-key go together: give both or neither")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, fmt.Errorf("--deliver-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--deliver-ca %s holds no PEM certificate", f.ca)
		}
	}
	if f.cert != "" {
		clientflags.WarnOpenToOthers("--deliver-key", f.key, "a private key")
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--deliver-cert %s / --deliver-key %s: %v", f.cert, f.key, err)
		}
		if c, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && time.Now().After(c.NotAfter) {
			return nil, fmt.Errorf("--deliver-cert %s expired at %s: renew it", f.cert, c.NotAfter.UTC().Format(time.RFC3339))
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// readToken reads the first line of a token file.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--deliver-token-file: %w", err)
	}
	clientflags.WarnOpenToOthers("--deliver-token-file", path, "a bearer token")
	token, _, _ := strings.Cut(string(b), "\n")
	token = strings.TrimSpace(token)
	switch {
	case token == "":
		return "", fmt.Errorf("--deliver-token-file %s: the first line is empty; put the token there", path)
	case !printable(token, false):
		return "", fmt.Errorf("--deliver-token-file %s: the token holds spaces or control characters (not shown)", path)
	}
	return token, nil
}

// readHeaderFile adds the headers of a file of "Name: value" lines to h;
// blank lines and lines starting with # are skipped. Errors name the line,
// never its value (it may be a secret).
func readHeaderFile(path string, h http.Header) error {
	file, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("--deliver-header-file: %w", err)
	}
	defer file.Close()
	clientflags.WarnOpenToOthers("--deliver-header-file", path, "request headers")
	sc := bufio.NewScanner(file)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		switch {
		case !ok || !headerName(name):
			return fmt.Errorf("--deliver-header-file %s line %d: want \"Name: value\"", path, n)
		case !printable(value, true):
			return fmt.Errorf("--deliver-header-file %s line %d (%s): the value holds control characters (not shown)", path, n, name)
		}
		switch http.CanonicalHeaderKey(name) {
		case "Content-Type", "Content-Length", "Host", "Traceparent", "Tracestate", "Transfer-Encoding", "Connection", deliver.DeadlineHeader:
			return fmt.Errorf("--deliver-header-file %s line %d: the member sets %s itself", path, n, name)
		}
		h.Add(name, value)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("--deliver-header-file %s: %w", path, err)
	}
	return nil
}

// serveDeliverMetrics serves the member's /metrics, /healthz and /readyz
// on addr with the endpoint's metrics and the keyed state's, if any
// (labelled with the group, as the member's are), among them, and /readyz
// not ready while the endpoint is not answering or a range's state
// restores. The consumer's own server is off then (its MetricsAddr
// empty): its HTTPHandler has no place for another package's metrics.
func serveDeliverMetrics(ctx context.Context, addr, group string, self *consumer.Consumer, ep *deliver.Endpoint, state *statestore.Store) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr %s: %w (is the port in use? choose another)", addr, err)
	}
	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"group": group}, reg)
	labelled.MustRegister(ep.Collector())
	if state != nil {
		labelled.MustRegister(state.Collector())
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	member := self.HTTPHandler()
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{self.Metrics(), reg}, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", member)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := ep.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if state != nil {
			if err := state.Ready(); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		member.ServeHTTP(w, r)
	})
	// The consumer's metrics server's limits (consumer.HTTPHandler's doc).
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, MaxHeaderBytes: 16 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}

// printable reports whether s is printable ASCII (and spaces, if spaces).
func printable(s string, spaces bool) bool {
	for _, r := range s {
		if r > '~' || r < ' ' || (r == ' ' && !spaces) {
			return false
		}
	}
	return true
}

// headerName reports whether s is an HTTP header name (RFC 9110's token).
func headerName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return true
}
