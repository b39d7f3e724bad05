package main

// Connection flags shared by every command that talks to etcd or Kafka,
// after etcdctl (--cacert, --cert, --key, --user) and kcat (-X, -F):
//
//	--etcd E --etcd-cacert CA --etcd-cert C --etcd-key K --etcd-user U
//	  (password from $KEYSHARE_ETCD_PASSWORD or --etcd-password-file)
//	--brokers B -X prop=value ... --kafka-config FILE
//
// No secret is ever a flag value (ps shows those): the etcd password comes
// from the environment or a file, Kafka secrets belong in --kafka-config.

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/cli"
)

// etcdPasswordEnv holds the etcd password when --etcd-user is set.
const etcdPasswordEnv = "KEYSHARE_ETCD_PASSWORD"

// connectTimeout bounds the first contact with etcd or Kafka.
const connectTimeout = 10 * time.Second

// etcdFlags are the etcd connection flags.
type etcdFlags struct {
	endpoints, cacert, cert, key, user, passwordFile string
	// pw is the password once read: $KEYSHARE_ETCD_PASSWORD is unset then.
	pw string
}

func (f *etcdFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoints, "etcd", "127.0.0.1:2379", "etcd endpoints, comma-separated")
	fs.StringVar(&f.cacert, "etcd-cacert", "", "verify etcd's certificate with this CA bundle (PEM); enables TLS")
	fs.StringVar(&f.cert, "etcd-cert", "", "client certificate for etcd (PEM); needs --etcd-key")
	fs.StringVar(&f.key, "etcd-key", "", "private key of --etcd-cert (PEM)")
	fs.StringVar(&f.user, "etcd-user", "", "etcd user name; the password comes from $"+etcdPasswordEnv+" or --etcd-password-file")
	fs.StringVar(&f.passwordFile, "etcd-password-file", "", "file holding the etcd password (first line)")
}

// tls returns the client TLS configuration, or nil for plain connections.
func (f *etcdFlags) tls() (*tls.Config, error) {
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
func (f *etcdFlags) password() (string, error) {
	if f.pw != "" {
		return f.pw, nil
	}
	pw, err := f.readPassword()
	if pw != "" {
		f.pw = pw
		os.Unsetenv(etcdPasswordEnv)
	}
	return pw, err
}

func (f *etcdFlags) readPassword() (string, error) {
	env, inEnv := os.LookupEnv(etcdPasswordEnv)
	switch {
	case f.user == "" && f.passwordFile != "":
		return "", cli.Usage(errors.New("--etcd-password-file needs --etcd-user"))
	case f.user == "":
		return "", nil
	case strings.Contains(f.user, ":"):
		return "", cli.Usage(errors.New("--etcd-user takes a name only (no user:password, which ps would show): put the password in $" + etcdPasswordEnv + " or --etcd-password-file"))
	case f.passwordFile != "" && inEnv:
		return "", cli.Usage(errors.New("the etcd password is given twice: unset $" + etcdPasswordEnv + " or drop --etcd-password-file"))
	case f.passwordFile != "":
		b, err := os.ReadFile(f.passwordFile)
		if err != nil {
			return "", fmt.Errorf("--etcd-password-file: %w", err)
		}
		warnOpenToOthers("--etcd-password-file", f.passwordFile, "the etcd password")
		pw, _, _ := strings.Cut(string(b), "\n")
		pw = strings.TrimRight(pw, "\r")
		if pw == "" {
			return "", fmt.Errorf("--etcd-password-file %s is empty", f.passwordFile)
		}
		return pw, nil
	case inEnv && env != "":
		return env, nil
	}
	return "", cli.Usage(fmt.Errorf("--etcd-user %s needs a password: set $%s or --etcd-password-file", f.user, etcdPasswordEnv))
}

// config builds the client configuration.
func (f *etcdFlags) config() (clientv3.Config, error) {
	tc, err := f.tls()
	if err != nil {
		return clientv3.Config{}, err
	}
	pw, err := f.password()
	if err != nil {
		return clientv3.Config{}, err
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

// connect returns a client that has proved, within connectTimeout, that it
// reaches etcd and may read the group's keys under root. Nothing is written.
// Each failure says what failed: the TLS handshake (and why), the
// credentials, or the permission on root.
func (f *etcdFlags) connect(ctx context.Context, cfg clientv3.Config, root string) (*clientv3.Client, error) {
	if cfg.TLS != nil {
		if err := probeTLS(ctx, cfg.Endpoints, cfg.TLS); err != nil {
			return nil, err
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, f.explain(err, root)
	}
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, root, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, f.explain(err, root)
	}
	return cli, nil
}

// explain turns an etcd client error into one that names what failed.
func (f *etcdFlags) explain(err error, root string) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return fmt.Errorf("etcd at %s refused the credentials of user %q: %w; check --etcd-user and the password", f.endpoints, f.user, err)
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return fmt.Errorf("etcd user %q may not read %s: %w; grant the user a role with readwrite on that prefix (docs/security.md)", f.user, root, err)
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return fmt.Errorf("etcd at %s has authentication enabled: %w; give --etcd-user and a password", f.endpoints, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("etcd at %s did not answer within %s: %w; check --etcd (and --etcd-cacert if it serves TLS)", f.endpoints, connectTimeout, err)
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

// kafkaFlags are the Kafka connection flags.
type kafkaFlags struct {
	brokers     string
	brokersSet  bool
	props       listFlag
	configFile  string
	defaultHost string
}

func (f *kafkaFlags) register(fs *flag.FlagSet, defaultBrokers, brokersUsage string) {
	f.defaultHost = defaultBrokers
	fs.Func("brokers", brokersUsage+" (bootstrap.servers; default "+orNone(defaultBrokers)+")", func(v string) error {
		f.brokers, f.brokersSet = v, true
		return nil
	})
	fs.Var(&f.props, "X", "librdkafka property prop=value (repeatable; put secrets in --kafka-config, ps shows flags)")
	fs.StringVar(&f.configFile, "kafka-config", "", "librdkafka properties file: key=value lines, # comments")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// kafkaSettings is the user's librdkafka configuration and where each key
// came from, so that librdkafka's refusal can name the file line or flag.
type kafkaSettings struct {
	m      kafka.ConfigMap
	origin map[string]string
}

// settings reads --kafka-config, then -X (which overrides the file), then
// --brokers. It returns a usage error for a malformed line or flag; the
// message never repeats a value, which may be a secret.
func (f *kafkaFlags) settings() (*kafkaSettings, error) {
	s := &kafkaSettings{m: kafka.ConfigMap{}, origin: map[string]string{}}
	if f.configFile != "" {
		fh, err := os.Open(f.configFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-config: %w", err)
		}
		defer fh.Close()
		sc := bufio.NewScanner(fh)
		for n := 1; sc.Scan(); n++ {
			line := strings.TrimSpace(sc.Text())
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			k = strings.TrimSpace(k)
			where := fmt.Sprintf("--kafka-config %s line %d", f.configFile, n)
			if !ok || k == "" {
				return nil, cli.Usage(fmt.Errorf("%s: want key=value", where))
			}
			s.m[k] = strings.TrimSpace(v)
			s.origin[k] = where
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("--kafka-config %s: %w", f.configFile, err)
		}
		for k := range s.m {
			if isSecretKey(k) {
				warnOpenToOthers("--kafka-config", f.configFile, "secrets ("+k+")")
				break
			}
		}
	}
	for _, p := range f.props {
		k, v, ok := strings.Cut(p, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, cli.Usage(fmt.Errorf("-X %s: want prop=value", strings.SplitN(p, "=", 2)[0]))
		}
		if isSecretKey(k) {
			fmt.Fprintf(os.Stderr, "keyshare: warning: -X %s puts a secret on the command line, where ps shows it (librdkafka treats the property as sensitive); use --kafka-config\n", k)
		}
		s.m[k] = v
		s.origin[k] = "-X " + k
	}
	switch _, inConfig := s.m["bootstrap.servers"]; {
	case f.brokersSet && inConfig && fmt.Sprint(s.m["bootstrap.servers"]) != f.brokers:
		return nil, cli.Usage(fmt.Errorf("--brokers %s and bootstrap.servers from %s differ: give one", f.brokers, s.origin["bootstrap.servers"]))
	case f.brokersSet:
		s.m["bootstrap.servers"], s.origin["bootstrap.servers"] = f.brokers, "--brokers"
	case !inConfig && f.defaultHost != "":
		s.m["bootstrap.servers"], s.origin["bootstrap.servers"] = f.defaultHost, "--brokers"
	}
	return s, nil
}

// has reports whether any broker is configured.
func (s *kafkaSettings) has() bool { return s.m["bootstrap.servers"] != nil }

// with returns a copy of the user's settings plus extra (which wins).
func (s *kafkaSettings) with(extra kafka.ConfigMap) kafka.ConfigMap {
	out := kafka.ConfigMap{}
	for k, v := range s.m {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

var unknownProp = regexp.MustCompile(`No such configuration property: "([^"]+)"|configuration property "([^"]+)"`)

// explain adds to a librdkafka configuration error where the key was set.
func (s *kafkaSettings) explain(err error) error {
	if err == nil {
		return nil
	}
	m := unknownProp.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	key := m[1] + m[2]
	if where, ok := s.origin[key]; ok {
		return fmt.Errorf("%w (set by %s)", err, where)
	}
	return err
}

// checkKafka proves, within connectTimeout, that the brokers answer with
// these settings: it describes the cluster through a short-lived producer
// and reports an authentication or TLS failure by name, when librdkafka
// reports it, rather than as a timeout. It also refuses an unknown
// property, naming where it was set. Brokers that do not answer in time
// are a kafkaUnreachableError. When ctx ends it returns ctx.Err() at once.
func checkKafka(ctx context.Context, s *kafkaSettings) error {
	cm := producerConfig(s.m)
	// This short-lived client's own logs are dropped: its errors arrive
	// as events, which name the failure below.
	cm["go.logs.channel.enable"] = true
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		//lint:ignore ST1005 Kafka is a proper noun
		return s.explain(fmt.Errorf("Kafka client: %w", err))
	}
	defer p.Close()
	go func() {
		for range p.Logs() {
		}
	}()
	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		//lint:ignore ST1005 Kafka is a proper noun
		return fmt.Errorf("Kafka client: %w", err)
	}
	defer a.Close()
	// DescribeCluster gives up when its context ends, so that neither
	// Ctrl-C nor a refusal waits for it: a blocking metadata call held
	// the producer's Close until its own timeout.
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	done := make(chan error, 1)
	go func() {
		_, err := a.DescribeCluster(dctx, kafka.SetAdminRequestTimeout(connectTimeout))
		done <- err
	}()
	answered := false
	defer func() {
		cancel()
		if !answered {
			<-done
		}
	}()
	var last error
	brokers := s.m["bootstrap.servers"]
	for {
		select {
		case err := <-done:
			answered = true
			switch {
			case err == nil:
				return nil
			case ctx.Err() != nil:
				return ctx.Err()
			case last != nil:
				//lint:ignore ST1005 Kafka is a proper noun
				return kafkaUnreachableError{fmt.Errorf("Kafka brokers %v did not answer within %s: %w (last error: %v); check that the brokers are reachable (--brokers) and the security settings (security.protocol, ssl.ca.location)", brokers, connectTimeout, err, last)}
			}
			//lint:ignore ST1005 Kafka is a proper noun
			return kafkaUnreachableError{fmt.Errorf("Kafka brokers %v did not answer within %s: %w; check that the brokers are reachable (--brokers) and the security settings (security.protocol, ssl.ca.location)", brokers, connectTimeout, err)}
		case ev := <-p.Events():
			if ke, ok := ev.(kafka.Error); ok {
				last = ke
				switch {
				case ke.Code() == kafka.ErrAuthentication || strings.Contains(ke.Error(), "SASL authentication error"):
					//lint:ignore ST1005 Kafka is a proper noun
					return fmt.Errorf("Kafka brokers %v refused the credentials: %v; check sasl.mechanism, sasl.username and sasl.password", brokers, ke)
				case ke.Code() == kafka.ErrSsl:
					//lint:ignore ST1005 Kafka is a proper noun
					return fmt.Errorf("Kafka brokers %v: TLS failed: %v; check ssl.ca.location and the client certificate", brokers, ke)
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// kafkaUnreachableError: the brokers did not answer checkKafka in time.
// A member goes on (its consumer keeps trying); other commands give up.
type kafkaUnreachableError struct{ error }

func (e kafkaUnreachableError) Unwrap() error { return e.error }

// producerConfig is the configuration of a producer made from the user's
// settings (consumer.ProducerConfig: the same without consumer-only keys).
func producerConfig(m kafka.ConfigMap) kafka.ConfigMap { return consumer.ProducerConfig(m) }
