package clientflags

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/consumer"
)

// Kafka are the Kafka connection flags.
type Kafka struct {
	brokers     string
	brokersSet  bool
	props       cli.List
	configFile  string
	defaultHost string
}

// DefaultBrokers is --brokers for every command that must reach Kafka, as
// --etcd defaults to etcd's own local address: the broker of a
// single-machine setup (keyshare cluster). A command that reads Kafka only
// to show more (status) registers no default and reads it only when asked.
const DefaultBrokers = "127.0.0.1:9092"

// Register adds --brokers (defaultBrokers when not given; "" for none),
// -X and --kafka-config to fs.
func (f *Kafka) Register(fs *flag.FlagSet, defaultBrokers, brokersUsage string) {
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

// KafkaSettings is the user's librdkafka configuration and where each key
// came from, so that librdkafka's refusal can name the file line or flag.
type KafkaSettings struct {
	m      kafka.ConfigMap
	origin map[string]string
}

// settings reads --kafka-config, then -X (which overrides the file), then
// --brokers. It returns a usage error for a malformed line or flag; the
// message never repeats a value, which may be a secret.
func (f *Kafka) Settings() (*KafkaSettings, error) {
	s := &KafkaSettings{m: kafka.ConfigMap{}, origin: map[string]string{}}
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
			if IsSecretKey(k) {
				WarnOpenToOthers("--kafka-config", f.configFile, "secrets ("+k+")")
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
		if IsSecretKey(k) {
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
func (s *KafkaSettings) Has() bool { return s.m["bootstrap.servers"] != nil }

// with returns a copy of the user's settings plus extra (which wins).
func (s *KafkaSettings) With(extra kafka.ConfigMap) kafka.ConfigMap {
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
func (s *KafkaSettings) Explain(err error) error {
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

// CheckKafka proves, within ConnectTimeout, that the brokers answer with
// these settings: it describes the cluster through a short-lived producer
// and reports an authentication or TLS failure by name, when librdkafka
// reports it, rather than as a timeout. It also refuses an unknown
// property, naming where it was set. Brokers that do not answer in time
// are a UnreachableError. When ctx ends it returns ctx.Err() at once.
func CheckKafka(ctx context.Context, s *KafkaSettings) error {
	cm := s.ProducerConfig()
	// This short-lived client's own logs are dropped: its errors arrive
	// as events, which name the failure below.
	cm["go.logs.channel.enable"] = true
	p, err := kafka.NewProducer(&cm)
	if err != nil {
		return s.Explain(fmt.Errorf("Kafka client: %w", err))
	}
	defer p.Close()
	go func() {
		for range p.Logs() {
		}
	}()
	a, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		return fmt.Errorf("Kafka client: %w", err)
	}
	defer a.Close()
	// DescribeCluster gives up when its context ends, so that neither
	// Ctrl-C nor a refusal waits for it: a blocking metadata call held
	// the producer's Close until its own timeout.
	dctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	done := make(chan error, 1)
	go func() {
		_, err := a.DescribeCluster(dctx, kafka.SetAdminRequestTimeout(ConnectTimeout))
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
				return UnreachableError{fmt.Errorf("Kafka brokers %v did not answer within %s: %w (last error: %v); check that the brokers are reachable (--brokers) and the security settings (security.protocol, ssl.ca.location)", brokers, ConnectTimeout, err, last)}
			}
			return UnreachableError{fmt.Errorf("Kafka brokers %v did not answer within %s: %w; check that the brokers are reachable (--brokers) and the security settings (security.protocol, ssl.ca.location)", brokers, ConnectTimeout, err)}
		case ev := <-p.Events():
			if ke, ok := ev.(kafka.Error); ok {
				last = ke
				switch {
				case ke.Code() == kafka.ErrAuthentication || strings.Contains(ke.Error(), "SASL authentication error"):
					return fmt.Errorf("Kafka brokers %v refused the credentials: %v; check sasl.mechanism, sasl.username and sasl.password", brokers, ke)
				case ke.Code() == kafka.ErrSsl:
					return fmt.Errorf("Kafka brokers %v: TLS failed: %v; check ssl.ca.location and the client certificate", brokers, ke)
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// UnreachableError: the brokers did not answer CheckKafka in time.
// A member goes on (its consumer keeps trying); other commands give up.
type UnreachableError struct{ error }

func (e UnreachableError) Unwrap() error { return e.error }

// ProducerConfig is the configuration of a producer made from the user's
// settings (consumer.ProducerConfig: the same without consumer-only keys).
func (s *KafkaSettings) ProducerConfig() kafka.ConfigMap { return consumer.ProducerConfig(s.m) }
