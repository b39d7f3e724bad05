package clientflags

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/cmd/internal/cli"
)

// warnings is where the connection flags warn (the tests read it).
var warnings io.Writer = os.Stderr

// EtcdPasswordEnv holds the etcd password when --etcd-user is set.
const EtcdPasswordEnv = "KEYSHARE_ETCD_PASSWORD"

// ConnectTimeout bounds the first contact with etcd or Kafka.
const ConnectTimeout = 10 * time.Second

// Etcd are the etcd connection flags.
type Etcd struct {
	endpoints, cacert, cert, key, user, passwordFile string
	// pw is the password once read: $KEYSHARE_ETCD_PASSWORD is unset then.
	pw string
	// warnedPlain: the warning of warnPlainPassword was given.
	warnedPlain bool
}

func (f *Etcd) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoints, "etcd", "127.0.0.1:2379", "etcd endpoints, comma-separated")
	fs.StringVar(&f.cacert, "etcd-cacert", "", "verify etcd's certificate with this CA bundle (PEM); enables TLS")
	fs.StringVar(&f.cert, "etcd-cert", "", "client certificate for etcd (PEM); needs --etcd-key")
	fs.StringVar(&f.key, "etcd-key", "", "private key of --etcd-cert (PEM)")
	fs.StringVar(&f.user, "etcd-user", "", "etcd user name; the password comes from $"+EtcdPasswordEnv+" or --etcd-password-file")
	fs.StringVar(&f.passwordFile, "etcd-password-file", "", "file holding the etcd password (first line)")
}

// tls returns the client TLS configuration, or nil for plain connections.
func (f *Etcd) tls() (*tls.Config, error) {
	if f.cacert == "" && f.cert == "" && f.key == "" {
		return nil, nil
	}
	if (f.cert == "") != (f.key == "") {
		return nil, cli.Usage(errors.New("--etcd-cert and --etcd-key go together: give both or neither"))
	}
	for flag, path := range map[string]string{"--etcd-cacert": f.cacert, "--etcd-cert": f.cert, "--etcd-key": f.key} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, path, err)
		}
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cert %s / --etcd-key %s: %v", f.cert, f.key, err)
		}
		if c, err := x509.ParseCertificate(pair.Certificate[0]); err == nil && time.Now().After(c.NotAfter) {
			return nil, fmt.Errorf("--etcd-cert %s expired at %s: renew it", f.cert, c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	info := transport.TLSInfo{TrustedCAFile: f.cacert, CertFile: f.cert, KeyFile: f.key}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd TLS (--etcd-cacert %s): %w", f.cacert, err)
	}
	return cfg, nil
}

// password reads the etcd password from the environment or the file. It
// removes it from the environment once read, so that no process started
// later (a handler's, librdkafka's kinit) inherits it; the process's own
// /proc/<pid>/environ, readable by its user, keeps what it started with:
// --etcd-password-file leaves no copy there.
func (f *Etcd) password() (string, error) {
	if f.pw != "" {
		return f.pw, nil
	}
	pw, err := f.readPassword()
	if pw != "" {
		f.pw = pw
		os.Unsetenv(EtcdPasswordEnv)
	}
	return pw, err
}

func (f *Etcd) readPassword() (string, error) {
	env, inEnv := os.LookupEnv(EtcdPasswordEnv)
	switch {
	case f.user == "" && f.passwordFile != "":
		return "", cli.Usage(errors.New("--etcd-password-file needs --etcd-user"))
	case f.user == "":
		return "", nil
	case strings.Contains(f.user, ":"):
		return "", cli.Usage(errors.New("--etcd-user takes a name only (no user:password, which ps would show): put the password in $" + EtcdPasswordEnv + " or --etcd-password-file"))
	case f.passwordFile != "" && inEnv:
		return "", cli.Usage(errors.New("the etcd password is given twice: unset $" + EtcdPasswordEnv + " or drop --etcd-password-file"))
	case f.passwordFile != "":
		b, err := os.ReadFile(f.passwordFile)
		if err != nil {
			return "", fmt.Errorf("--etcd-password-file: %w", err)
		}
		WarnOpenToOthers("--etcd-password-file", f.passwordFile, "the etcd password")
		pw, _, _ := strings.Cut(string(b), "\n")
		pw = strings.TrimRight(pw, "\r")
		if pw == "" {
			return "", fmt.Errorf("--etcd-password-file %s is empty", f.passwordFile)
		}
		return pw, nil
	case inEnv && env != "":
		return env, nil
	}
	return "", cli.Usage(fmt.Errorf("--etcd-user %s needs a password: set $%s or --etcd-password-file", f.user, EtcdPasswordEnv))
}

// config builds the client configuration.
func (f *Etcd) Config() (clientv3.Config, error) {
	tc, err := f.tls()
	if err != nil {
		return clientv3.Config{}, err
	}
	pw, err := f.password()
	if err != nil {
		return clientv3.Config{}, err
	}
	if pw != "" && tc == nil {
		f.warnPlainPassword()
	}
	return clientv3.Config{
		Endpoints:   strings.Split(f.endpoints, ","),
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		TLS:         tc,
		Username:    f.user,
		Password:    pw,
	}, nil
}

// warnPlainPassword warns, once, that the etcd password is about to cross
// connections without TLS, where anyone on the path can read it (etcd's
// Authenticate sends it as it is). Endpoints written https:// get TLS from
// the client even without --etcd-cacert, so they are not warned about. It
// only warns: a loopback or otherwise private network may be meant.
func (f *Etcd) warnPlainPassword() {
	if f.warnedPlain {
		return
	}
	for _, ep := range strings.Split(f.endpoints, ",") {
		if strings.HasPrefix(ep, "https://") || strings.HasPrefix(ep, "unixs://") {
			return
		}
	}
	f.warnedPlain = true
	fmt.Fprintf(warnings, "keyshare: warning: the etcd password of --etcd-user %s goes to %s without TLS, readable on the network: give --etcd-cacert (and https:// endpoints) to encrypt it\n",
		f.user, f.endpoints)
}

// connect returns a client that has proved, within ConnectTimeout, that it
// reaches etcd and may read the group's keys under root. Nothing is written.
// Each failure says what failed: the TLS handshake (and why), the
// credentials, or the permission on root.
func (f *Etcd) Connect(ctx context.Context, cfg clientv3.Config, root string) (*clientv3.Client, error) {
	if cfg.TLS != nil {
		if err := probeTLS(ctx, cfg.Endpoints, cfg.TLS); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, f.explain(err, root)
	}
	pctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, root, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, f.explain(err, root)
	}
	return cli, nil
}

// explain turns an etcd client error into one that names what failed.
func (f *Etcd) explain(err error, root string) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("etcd at %s refused the credentials of user %q: %w; check --etcd-user and the password", f.endpoints, f.user, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcd user %q may not read %s: %w; grant the user a role with readwrite on that prefix (docs/security.md)", f.user, root, err)
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcd at %s has authentication enabled: %w; give --etcd-user and a password", f.endpoints, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("etcd at %s did not answer within %s: %w; check --etcd (and --etcd-cacert if it serves TLS)", f.endpoints, ConnectTimeout, err)
	}
	return fmt.Errorf("etcd at %s: %w; check --etcd", f.endpoints, err)
}

// probeTLS makes one TLS handshake (and one HTTP/2 round, so that a server
// refusing the client certificate is heard) with the first endpoint that
// answers. gRPC would otherwise retry a failing handshake until its deadline
// and report only "context deadline exceeded".
func probeTLS(ctx context.Context, endpoints []string, tc *tls.Config) error {
	var errs []error
	for _, ep := range endpoints {
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
		}
		err := probeOne(ctx, host, tc)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func probeOne(ctx context.Context, host string, tc *tls.Config) error {
	c := tc.Clone()
	c.NextProtos = []string{"h2"}
	if c.ServerName == "" {
		h, _, err := net.SplitHostPort(host)
		if err != nil {
			h = host
		}
		c.ServerName = h
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: c}
	conn, err := d.DialContext(dctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("etcd TLS handshake with %s failed: %w; check --etcd-cacert (the CA that signed etcd's certificate) and that the certificate is valid and names %s", host, err, c.ServerName)
	}
	defer conn.Close()
	deadline, _ := dctx.Deadline()
	conn.SetDeadline(deadline)
	_, err = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"))
	if err == nil {
		_, err = conn.Read(make([]byte, 9))
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil // the server holds the connection open: it accepted us
		}
		return fmt.Errorf("etcd at %s refused the TLS client certificate: %w; check --etcd-cert and --etcd-key (signed by a CA etcd trusts, not expired)", host, err)
	}
	return nil
}
