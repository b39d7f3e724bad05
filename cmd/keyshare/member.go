package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/deliver"
	"github.com/keyshare/keyshare/internal/cli"
	"github.com/keyshare/keyshare/internal/clientflags"
	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/internal/textsafe"
)

type memberCommand struct {
	etcdConn                                                   clientflags.Etcd
	kafkaConn                                                  clientflags.Kafka
	work, record, logLevel, logFormat, stall, audit, autoReset string
	retentionLoss, balance                                     string
	topics                                                     cli.List
	batchSize                                                  int
	failRate                                                   float64
	batchWait                                                  time.Duration
	deliver                                                    deliverFlags // member_deliver.go
	// deliverCfg is the endpoint's configuration when --deliver is set.
	deliverCfg deliver.Config
	// cfg is the consumer's configuration: the flags of member_flags.go
	// set its fields, config fills in the rest.
	cfg consumer.Config
}

func (c *memberCommand) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	c.cfg = consumer.DefaultConfig()
	c.kafkaConn.Register(fs, "127.0.0.1:9092", "Kafka bootstrap servers")
	c.etcdConn.Register(fs)
	fs.Var(&c.topics, "topic", "topic to consume (repeatable, at least one)")
	fs.StringVar(&c.work, "work", "0", "simulated work per record: a duration (5ms), uniform:MIN-MAX (uniform:0-5ms) or exp:MEAN (exp:2ms); or per handler call: call:FIXED+PER_RECORD (call:5ms+0.05ms)")
	fs.IntVar(&c.batchSize, "batch-size", 0, "hand records to the handler in batches of up to N (any keys, per-key order kept); 0 handles one record per call")
	fs.DurationVar(&c.batchWait, "batch-wait", 10*time.Millisecond, "with --batch-size: how long a batch waits for more records once it has one")
	fs.StringVar(&c.record, "record", "", "append one JSON line per handled record to this file (written before the record counts as done)")
	fs.Float64Var(&c.failRate, "fail-rate", 0, "probability that an attempt fails (0-1)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: "+strings.Join(cli.LogLevels, ", "))
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text, or json (one JSON object per line)")
	fs.StringVar(&c.stall, "stall", "", "simulate a stuck key: KEY:DURATION makes the first record of KEY take DURATION")
	fs.StringVar(&c.audit, "audit", "", "append one JSON line per etcd write etcd accepted (keys and revision) to this file")
	c.deliver.register(fs)
	c.registerConfigFlags(fs) // member_flags.go
	return fs
}

func (c *memberCommand) Run(ctx context.Context, args []string) error {
	ks, err := c.parse(args) // member_flags.go: every check that needs no network
	if err != nil {
		return err
	}
	cost, err := parseCost(c.work) // member_batch.go
	if err != nil {
		return cli.Usage(err)
	}
	stallKey, stallFor, err := parseStall(c.stall)
	if err != nil {
		return cli.Usage(err)
	}
	var stalled sync.Once
	log, err := cli.NewLogger("keyshare", c.logLevel, c.logFormat)
	if err != nil {
		return cli.Usage(err)
	}
	cfg := c.cfg
	cfg.Logger = log

	var rec *recordLog
	if c.record != "" {
		if rec, err = openRecordLog(c.record); err != nil {
			return err
		}
		defer rec.close()
	}
	etcdCfg, err := c.etcdConn.Config()
	if err != nil {
		return err
	}
	if c.audit != "" {
		if c.cfg.MemberID == "" {
			return cli.Usage(errors.New("--audit needs --id: each line names the member"))
		}
		audit, err := openAuditLog(c.audit, c.cfg.MemberID)
		if err != nil {
			return err
		}
		defer audit.close()
		etcdCfg.DialOptions = append(etcdCfg.DialOptions, grpc.WithChainUnaryInterceptor(audit.interceptor()))
	}
	if err := clientflags.CheckKafka(ctx, ks); err != nil {
		var unreachable clientflags.UnreachableError
		if !errors.As(err, &unreachable) {
			return err
		}
		// A broker that is starting answers later: the member keeps
		// trying (its consumer retries, logging what fails once a minute).
		log.Warn("Kafka brokers not reachable yet; the member keeps trying", "error", err)
	}
	cli, err := c.etcdConn.Connect(ctx, etcdCfg, keys.New(cfg.Prefix, cfg.Group).Root())
	if err != nil {
		return err
	}
	defer cli.Close()

	if c.deliver.url != "" {
		return c.runDelivering(ctx, cli, cfg, ks)
	}
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	var self *consumer.Consumer
	if c.batchSize > 0 {
		cfg.BatchHandler = c.batchHandler(cost, &mu, rng, stallKey, stallFor, &stalled, rec, func() string { return self.ID() })
	}
	cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
		start := time.Now()
		mu.Lock()
		d, fail := cost(rng, 1), rng.Float64() < c.failRate
		mu.Unlock()
		if stallKey != "" && string(m.Key) == stallKey {
			stalled.Do(func() { d += stallFor })
		}
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if fail {
			return errors.New("simulated failure (--fail-rate)")
		}
		if rec != nil {
			return rec.write(self.ID(), m, start)
		}
		return nil
	}
	if cfg.BatchHandler != nil {
		cfg.Handler = nil
	}
	self, err = consumer.New(cli, cfg)
	if err != nil {
		return err
	}
	log.Info("member starting", "id", self.ID(), "group", cfg.Group, "topics", strings.Join(cfg.Topics, ","), "batch_size", c.batchSize)
	return ks.Explain(self.Run(ctx))
}

// runDelivering runs the member with the --deliver endpoint as its
// handler.
func (c *memberCommand) runDelivering(ctx context.Context, etcd *clientv3.Client, cfg consumer.Config, ks *clientflags.KafkaSettings) error {
	if cfg.MemberID == "" {
		cfg.MemberID = coord.DefaultMemberID() // the endpoint is told it
	}
	dcfg := c.deliverCfg
	dcfg.MemberID = cfg.MemberID
	dcfg.Logger = cfg.Logger.Named("deliver")
	ep, err := deliver.New(dcfg)
	if err != nil {
		return err
	}
	defer ep.Close()
	if c.batchSize > 0 {
		cfg.BatchHandler = ep.BatchHandler()
	} else {
		cfg.Handler = ep.Handler()
	}
	metricsAddr := cfg.MetricsAddr
	cfg.MetricsAddr = "" // served below, with the endpoint's metrics and readiness
	self, err := consumer.New(etcd, cfg)
	if err != nil {
		return err
	}
	if metricsAddr != "" {
		stop, err := serveDeliverMetrics(ctx, metricsAddr, cfg.Group, self, ep)
		if err != nil {
			return err
		}
		defer stop()
	}
	cfg.Logger.Info("member starting", "id", self.ID(), "group", cfg.Group, "topics", strings.Join(cfg.Topics, ","),
		"batch_size", c.batchSize, "deliver", textsafe.Escape(ep.String()))
	return ks.Explain(self.Run(ctx))
}

// parseStall reads KEY:DURATION ("" means no stall).
func parseStall(spec string) (string, time.Duration, error) {
	if spec == "" {
		return "", 0, nil
	}
	i := strings.LastIndex(spec, ":")
	if i <= 0 {
		return "", 0, fmt.Errorf("--stall %q: want KEY:DURATION, e.g. key-3:20s", spec)
	}
	d, err := time.ParseDuration(spec[i+1:])
	if err != nil || d <= 0 {
		return "", 0, fmt.Errorf("--stall %q: want KEY:DURATION, e.g. key-3:20s", spec)
	}
	return spec[:i], d, nil
}

// parseWork reads a work distribution.
func parseWork(spec string) (func(*rand.Rand) time.Duration, error) {
	bad := fmt.Errorf("--work %q: want a duration (5ms), uniform:MIN-MAX (uniform:0-5ms), exp:MEAN (exp:2ms) or call:FIXED+PER_RECORD (call:5ms+0.05ms)", spec)
	kind, arg, hasKind := strings.Cut(spec, ":")
	switch {
	case !hasKind:
		if spec == "0" {
			return func(*rand.Rand) time.Duration { return 0 }, nil
		}
		d, err := time.ParseDuration(spec)
		if err != nil || d < 0 {
			return nil, bad
		}
		return func(*rand.Rand) time.Duration { return d }, nil
	case kind == "uniform":
		lo, hi, ok := strings.Cut(arg, "-")
		if !ok {
			return nil, bad
		}
		hiD, err := time.ParseDuration(hi)
		if err != nil {
			return nil, bad
		}
		// "0-5ms": the unit of the upper bound applies to a bare lower bound.
		loD, err := time.ParseDuration(lo)
		if err != nil {
			f, ferr := strconv.ParseFloat(lo, 64)
			if ferr != nil {
				return nil, bad
			}
			unit := strings.TrimLeft(hi, "0123456789.")
			u, uerr := time.ParseDuration("1" + unit)
			if uerr != nil {
				return nil, bad
			}
			loD = time.Duration(f * float64(u))
		}
		if loD < 0 || hiD < loD {
			return nil, bad
		}
		return func(r *rand.Rand) time.Duration { return loD + time.Duration(r.Int64N(int64(hiD-loD)+1)) }, nil
	case kind == "exp":
		mean, err := time.ParseDuration(arg)
		if err != nil || mean <= 0 {
			return nil, bad
		}
		return func(r *rand.Rand) time.Duration { return time.Duration(r.ExpFloat64() * float64(mean)) }, nil
	}
	return nil, bad
}

// recordLog appends one JSON line per handled record.
type recordLog struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

// handledRecord is one line of a record log.
type handledRecord struct {
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Key       string    `json:"key"`
	Value     string    `json:"value"`
	Start     time.Time `json:"start"` // when the handler was called (this attempt)
	Time      time.Time `json:"time"`  // when it finished
}

// openRecordLog opens the log, creating it readable by this user only: it
// holds record values.
func openRecordLog(path string) (*recordLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("--record %s: %w", path, err)
	}
	clientflags.WarnOpenToOthers("--record", path, "record keys and values")
	return &recordLog{f: f, w: bufio.NewWriter(f)}, nil
}

// write appends the line and hands it to the OS before returning, so that a
// record counts as done only once its side effect is in the file (a SIGKILL
// of the process does not lose it).
func (l *recordLog) write(member string, m *kafka.Message, start time.Time) error {
	b, _ := json.Marshal(handledRecord{
		Member: member, Topic: *m.TopicPartition.Topic, Partition: m.TopicPartition.Partition,
		Offset: int64(m.TopicPartition.Offset), Key: string(m.Key), Value: string(m.Value), Start: start.UTC(), Time: time.Now().UTC(),
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Write(append(b, '\n'))
	return l.w.Flush()
}

func (l *recordLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.w.Flush()
	l.f.Close()
}
