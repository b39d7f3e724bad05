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
	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/cli"
	"github.com/keyshare/keyshare/internal/keys"
)

type memberCommand struct {
	etcdConn                                                                             etcdFlags
	kafkaConn                                                                            kafkaFlags
	prefix, group, id, work, record, dlq, logLevel, metrics, stall, audit, retentionLoss string
	topics                                                                               listFlag
	concurrency, maxInFlight, batchSize                                                  int
	maxInFlightBytes                                                                     int64
	failRate                                                                             float64
	stuck, batchWait                                                                     time.Duration
	// tuning is the consumer's coord.Tuning; its flags set its fields.
	tuning coord.Tuning
}

func (c *memberCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	c.tuning = coord.DefaultTuning()
	c.kafkaConn.register(fs, "127.0.0.1:9092", "Kafka bootstrap servers")
	c.etcdConn.register(fs)
	fs.StringVar(&c.group, "group", "", "group name (required)")
	fs.StringVar(&c.prefix, "prefix", "/keyshare", "etcd prefix of all groups")
	fs.Var(&c.topics, "topic", "topic to consume (repeatable, at least one)")
	fs.StringVar(&c.id, "id", "", "member id (default hostname-pid-random)")
	fs.IntVar(&c.concurrency, "concurrency", 16, "records handled at once")
	fs.IntVar(&c.maxInFlight, "max-in-flight", 1000, "records fetched but not finished before fetching pauses")
	fs.Int64Var(&c.maxInFlightBytes, "max-in-flight-bytes", consumer.DefaultConfig().MaxInFlightBytes, "bytes (keys, values, headers) of the records fetched but not finished before fetching pauses")
	fs.StringVar(&c.work, "work", "0", "simulated work per record: a duration (5ms), uniform:MIN-MAX (uniform:0-5ms) or exp:MEAN (exp:2ms); or per handler call: call:FIXED+PER_RECORD (call:5ms+0.05ms)")
	fs.IntVar(&c.batchSize, "batch-size", 0, "hand records to the handler in batches of up to N (any keys, per-key order kept); 0 handles one record per call")
	fs.DurationVar(&c.batchWait, "batch-wait", 10*time.Millisecond, "with --batch-size: how long a batch waits for more records once it has one")
	fs.StringVar(&c.record, "record", "", "append one JSON line per handled record to this file (written before the record counts as done)")
	fs.Float64Var(&c.failRate, "fail-rate", 0, "probability that an attempt fails (0-1)")
	fs.StringVar(&c.dlq, "dlq", "", "dead-letter topic for records that keep failing")
	fs.DurationVar(&c.tuning.SessionTTL, "ttl", c.tuning.SessionTTL, "etcd session TTL")
	fs.DurationVar(&c.tuning.DrainTimeout, "drain-timeout", c.tuning.DrainTimeout, "how long a revoked range may take to finish")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.StringVar(&c.stall, "stall", "", "simulate a stuck key: KEY:DURATION makes the first record of KEY take DURATION")
	fs.StringVar(&c.metrics, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this host:port")
	fs.DurationVar(&c.stuck, "stuck-timeout", 30*time.Second, "report a range whose watermark has not moved for this long")
	fs.StringVar(&c.retentionLoss, "retention-loss", "report", `records Kafka deleted before they were handled: "report" them in etcd and go on, or "halt" the partition`)
	fs.StringVar(&c.audit, "audit", "", "append one JSON line per etcd write etcd accepted (keys and revision) to this file")
	fs.StringVar((*string)(&c.tuning.Balance), "balance", string(c.tuning.Balance), `what the leader balances among members sharing partitions: "load" (the members' load reports) or "width" (hash space by weight); give every member the same`)
	fs.DurationVar(&c.tuning.LoadReportInterval, "load-report-interval", c.tuning.LoadReportInterval, "how often the member writes its ranges' load to etcd (load/<member-id>); at least 100ms")
	fs.Float64Var(&c.tuning.LoadMinGain, "load-min-gain", c.tuning.LoadMinGain, "as leader, move ranges by load only when the busiest member's load would drop by this factor (1.05 to 100)")
	fs.Float64Var(&c.tuning.LoadMinBusy, "load-min-busy", c.tuning.LoadMinBusy, "as leader, move ranges by load only while the busiest member has at least this many busy worker-seconds per second (0 moves on any imbalance)")
	fs.DurationVar(&c.tuning.LoadCooldown, "load-cooldown", c.tuning.LoadCooldown, "as leader, the least time between two load-driven moves; at least --load-report-interval")
	fs.IntVar(&c.tuning.MaxTxnOps, "max-txn-ops", c.tuning.MaxTxnOps, "the etcd server's --max-txn-ops: the most operations keyshare puts in one etcd transaction; set it to the server's value (at least 8)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if c.group == "" || len(c.topics) == 0 {
		return cli.Usage(errors.New("--group and at least one --topic are required"))
	}
	cost, err := parseCost(c.work) // member_batch.go
	if err != nil {
		return cli.Usage(err)
	}
	if err := c.checkBatchFlags(); err != nil {
		return cli.Usage(err)
	}
	stallKey, stallFor, err := parseStall(c.stall)
	if err != nil {
		return cli.Usage(err)
	}
	if b := c.tuning.Balance; b != coord.BalanceLoad && b != coord.BalanceWidth {
		return cli.Usage(fmt.Errorf("--balance %q: want %q or %q", b, coord.BalanceLoad, coord.BalanceWidth))
	}
	if c.tuning.LoadReportInterval < 100*time.Millisecond {
		return cli.Usage(fmt.Errorf("--load-report-interval %s: want at least 100ms", c.tuning.LoadReportInterval))
	}
	if c.tuning.MaxTxnOps < 8 {
		return cli.Usage(fmt.Errorf("--max-txn-ops %d: want at least 8, the etcd server's --max-txn-ops (default %d)", c.tuning.MaxTxnOps, coord.DefaultMaxTxnOps))
	}
	var stalled sync.Once
	if c.failRate < 0 || c.failRate > 1 {
		return cli.Usage(fmt.Errorf("--fail-rate %g: want a probability between 0 and 1", c.failRate))
	}
	log := newLogger("keyshare", c.logLevel)

	var rec *recordLog
	if c.record != "" {
		if rec, err = openRecordLog(c.record); err != nil {
			return err
		}
		defer rec.close()
	}
	ks, err := c.kafkaConn.settings()
	if err != nil {
		return err
	}
	etcdCfg, err := c.etcdConn.config()
	if err != nil {
		return err
	}
	if c.audit != "" {
		if c.id == "" {
			return cli.Usage(errors.New("--audit needs --id: each line names the member"))
		}
		audit, err := openAuditLog(c.audit, c.id)
		if err != nil {
			return err
		}
		defer audit.close()
		etcdCfg.DialOptions = append(etcdCfg.DialOptions, grpc.WithChainUnaryInterceptor(audit.interceptor()))
	}
	if err := coord.CheckName("--group", c.group); err != nil {
		return cli.Usage(err)
	}
	if err := checkKafka(ctx, ks); err != nil {
		var unreachable kafkaUnreachableError
		if !errors.As(err, &unreachable) {
			return err
		}
		// A broker that is starting answers later: the member keeps
		// trying (its consumer retries, logging what fails once a minute).
		log.Warn("Kafka brokers not reachable yet; the member keeps trying", "error", err)
	}
	cli, err := c.etcdConn.connect(ctx, etcdCfg, keys.New(c.prefix, c.group).Root())
	if err != nil {
		return err
	}
	defer cli.Close()

	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics, cfg.MemberID = c.group, c.topics, c.id
	cfg.Kafka = ks.with(nil)
	if _, ok := cfg.Kafka["log_level"]; !ok {
		cfg.Kafka["log_level"] = 4
	}
	cfg.Prefix = c.prefix
	cfg.Concurrency, cfg.MaxInFlight, cfg.MaxInFlightBytes = c.concurrency, c.maxInFlight, c.maxInFlightBytes
	cfg.Tuning = c.tuning
	cfg.DeadLetterTopic = c.dlq
	cfg.MetricsAddr, cfg.StuckTimeout = c.metrics, c.stuck
	cfg.RetentionLoss = consumer.RetentionLossPolicy(c.retentionLoss)
	cfg.Logger = log
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))
	var self *consumer.Consumer
	if c.batchSize > 0 {
		cfg.MaxBatchSize, cfg.MaxBatchWait = c.batchSize, c.batchWait
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
	log.Info("member starting", "id", self.ID(), "group", c.group, "topics", strings.Join(c.topics, ","), "batch_size", c.batchSize)
	return ks.explain(self.Run(ctx))
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
	warnOpenToOthers("--record", path, "record keys and values")
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
