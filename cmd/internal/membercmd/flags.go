package membercmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
)

// configFlags names the flag of each consumer.Config setting a member takes
// from the command line, by its Go field (Retry's as Retry.X; coord.Tuning's
// by their own names, promoted into Config). flagError uses it to turn the
// library's validation errors, which name fields, into errors that name
// flags. Config's other fields have no flag of their own (noConfigFlag).
var configFlags = map[string]string{
	"Group":              "--group",
	"Topics":             "--topic",
	"AutoOffsetReset":    "--auto-offset-reset",
	"RetentionLoss":      "--retention-loss",
	"MaxBatchSize":       "--batch-size",
	"MaxBatchWait":       "--batch-wait",
	"Concurrency":        "--concurrency",
	"MaxInFlight":        "--max-in-flight",
	"MaxInFlightBytes":   "--max-in-flight-bytes",
	"MaxQueuedPerKey":    "--max-queued-per-key",
	"FlushInterval":      "--flush-interval",
	"MaxUnflushed":       "--max-unflushed",
	"FlushEntryBytes":    "--flush-entry-bytes",
	"EtcdTimeout":        "--etcd-timeout",
	"CommitInterval":     "--commit-interval",
	"Retry.MaxAttempts":  "--max-attempts",
	"Retry.Backoff":      "--retry-backoff",
	"Retry.MaxBackoff":   "--retry-max-backoff",
	"DeadLetterTopic":    "--dlq",
	"MemberID":           "--id",
	"Weight":             "--weight",
	"Prefix":             "--prefix",
	"StartTimeout":       "--start-timeout",
	"StuckTimeout":       "--stuck-timeout",
	"MetricsAddr":        "--metrics-addr",
	"SessionTTL":         "--ttl",
	"DeadlineMargin":     "--deadline-margin",
	"FailoverGrace":      "--failover-grace",
	"DrainTimeout":       "--drain-timeout",
	"RebalanceDebounce":  "--rebalance-debounce",
	"PartitionRefresh":   "--partition-refresh",
	"MaxTxnOps":          "--max-txn-ops",
	"Balance":            "--balance",
	"LoadReportInterval": "--load-report-interval",
	"LoadMinGain":        "--load-min-gain",
	"LoadMinBusy":        "--load-min-busy",
	"LoadCooldown":       "--load-cooldown",
}

// noConfigFlag are the consumer.Config fields with no flag of their own,
// and what sets them instead.
var noConfigFlag = map[string]string{
	"Kafka":        "-X, --kafka-config and --brokers",
	"Handler":      "--deliver (deliver.go), or in keyshare-bench member the lab's simulated work (lab.go)",
	"BatchHandler": "--batch-size, with --deliver or the lab's simulated work",
	"Logger":       "--log-level and --log-format",
	// The member command exports no traces: a tracer provider needs an
	// exporter, which a service embedding the library brings.
	"TracerProvider": "nothing: only code embedding the library sets it",
	// A join reads the other topic's state with statestore.Store.Lookup,
	// which an endpoint behind --deliver has no way to call.
	"CoPartitioned": "nothing: only code embedding the library joins topics",
}

// registerConfigFlags registers the flags of consumer.Config's settings,
// each defaulting to DefaultConfig's value.
func (c *Command) registerConfigFlags(fs *flag.FlagSet) {
	cfg := &c.cfg
	fs.StringVar(&cfg.Group, "group", "", "group name (required)")
	fs.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "etcd prefix of all groups")
	fs.StringVar(&cfg.MemberID, "id", "", "member id (default hostname-pid-random)")
	fs.IntVar(&cfg.Weight, "weight", cfg.Weight, "the member's capacity relative to the others' (1 to 1000000): a member of weight 2 gets twice the hash space or load of one of weight 1")
	fs.StringVar(&c.autoReset, "auto-offset-reset", string(cfg.AutoOffsetReset), `where a range starts when the group has no state and no committed offset: "earliest" or "latest" (Kafka's auto.offset.reset; keyshare decides it, so -X auto.offset.reset is refused)`)
	fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "records handled at once")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", cfg.MaxInFlight, "records fetched but not finished before fetching pauses")
	fs.Int64Var(&cfg.MaxInFlightBytes, "max-in-flight-bytes", cfg.MaxInFlightBytes, "bytes (keys, values, headers) of the records fetched but not finished before fetching pauses")
	fs.IntVar(&cfg.MaxQueuedPerKey, "max-queued-per-key", cfg.MaxQueuedPerKey, "records of one blocked key kept in memory (0: min(100, --max-in-flight/4))")
	fs.DurationVar(&cfg.FlushInterval, "flush-interval", cfg.FlushInterval, "how often completed offsets are written to etcd; bounds the records that run twice after a crash")
	fs.IntVar(&cfg.MaxUnflushed, "max-unflushed", cfg.MaxUnflushed, "records completed but not yet recorded in etcd before the member stops taking records")
	fs.IntVar(&cfg.FlushEntryBytes, "flush-entry-bytes", cfg.FlushEntryBytes, "size of a range's ledger entry at which it is written at once (1024 to 1048576)")
	fs.DurationVar(&cfg.EtcdTimeout, "etcd-timeout", cfg.EtcdTimeout, "bound on each etcd request of the data path (ledger flushes, the leader's rounds)")
	fs.DurationVar(&cfg.CommitInterval, "commit-interval", cfg.CommitInterval, "as leader, how often safe offsets are committed to Kafka")
	fs.IntVar(&cfg.Retry.MaxAttempts, "max-attempts", cfg.Retry.MaxAttempts, "attempts of a failing record before it goes to --dlq (without --dlq it is retried forever)")
	fs.DurationVar(&cfg.Retry.Backoff, "retry-backoff", cfg.Retry.Backoff, "wait after a record's first failure; doubles up to --retry-max-backoff")
	fs.DurationVar(&cfg.Retry.MaxBackoff, "retry-max-backoff", cfg.Retry.MaxBackoff, "longest wait between two attempts of a record")
	fs.StringVar(&cfg.DeadLetterTopic, "dlq", "", "dead-letter topic for records that keep failing")
	fs.StringVar(&c.retentionLoss, "retention-loss", string(cfg.RetentionLoss), `records Kafka deleted before they were handled: "report" them in etcd and go on, or "halt" the partition`)
	fs.DurationVar(&cfg.StartTimeout, "start-timeout", cfg.StartTimeout, "bound on each attempt of the calls retried while Kafka or etcd cannot answer yet")
	fs.DurationVar(&cfg.StuckTimeout, "stuck-timeout", cfg.StuckTimeout, "report a range whose watermark has not moved for this long")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve /metrics, /healthz and /readyz on this host:port")
	fs.DurationVar(&cfg.SessionTTL, "ttl", cfg.SessionTTL, "etcd session TTL: a member that stops answering loses its ranges this long after (at least 1s)")
	fs.DurationVar(&cfg.DeadlineMargin, "deadline-margin", cfg.DeadlineMargin, "stop starting records this long before the session could expire (0: --ttl/10; at most --ttl/2)")
	fs.DurationVar(&cfg.FailoverGrace, "failover-grace", cfg.FailoverGrace, "as leader, wait this long after a member's session is gone before giving its ranges away (0 turns it off)")
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", cfg.DrainTimeout, "how long a revoked range may take to finish (at most 1h)")
	fs.DurationVar(&cfg.RebalanceDebounce, "rebalance-debounce", cfg.RebalanceDebounce, "as leader, wait this long after a member joins or goes before reassigning")
	fs.DurationVar(&cfg.PartitionRefresh, "partition-refresh", cfg.PartitionRefresh, "as leader, how often partition counts are reread from Kafka")
	fs.StringVar(&c.balance, "balance", string(cfg.Balance), `what the leader balances among members sharing partitions: "load" (the members' load reports) or "width" (hash space by weight); give every member the same`)
	fs.DurationVar(&cfg.LoadReportInterval, "load-report-interval", cfg.LoadReportInterval, "how often the member writes its ranges' load to etcd (load/<member-id>); at least 100ms")
	fs.Float64Var(&cfg.LoadMinGain, "load-min-gain", cfg.LoadMinGain, "as leader, move ranges by load only when the busiest member's load would drop by this factor (1.05 to 100)")
	fs.Float64Var(&cfg.LoadMinBusy, "load-min-busy", cfg.LoadMinBusy, "as leader, move ranges by load only while the busiest member has at least this many busy worker-seconds per second (0 moves on any imbalance)")
	fs.DurationVar(&cfg.LoadCooldown, "load-cooldown", cfg.LoadCooldown, "as leader, the least time between two load-driven moves; at least --load-report-interval")
	fs.IntVar(&cfg.MaxTxnOps, "max-txn-ops", cfg.MaxTxnOps, "the etcd server's --max-txn-ops: the most operations keyshare puts in one etcd transaction; set it to the server's value (at least 8)")
}

// parse reads the command line into c and checks every setting, all before
// any network: a bad value is a usage error (exit status 2) naming its flag.
// It returns the Kafka settings.
func (c *Command) parse(args []string) (*clientflags.KafkaSettings, error) {
	fs := c.flagSet()
	if err := cli.Parse(fs, args); err != nil {
		if moved := labFlagIn(args); c.lab == nil && moved != "" {
			return nil, cli.Usage(fmt.Errorf("--%s is not a flag of keyshare member, which delivers every record to --deliver URL; simulated work (--work, --fail-rate, --stall) and the --record and --audit logs are the lab binary's: keyshare-bench member", moved))
		}
		return nil, err
	}
	cfg := &c.cfg
	needDeliver := c.lab == nil && c.deliver.url == ""
	if cfg.Group == "" || len(c.topics) == 0 {
		if needDeliver {
			return nil, cli.Usage(errors.New("--group, at least one --topic and --deliver URL are required"))
		}
		return nil, cli.Usage(errors.New("--group and at least one --topic are required"))
	}
	if err := coord.CheckName("--group", cfg.Group); err != nil {
		return nil, cli.Usage(err)
	}
	if _, err := cli.NewLogger("keyshare", c.logLevel, c.logFormat); err != nil {
		return nil, cli.Usage(err)
	}
	cfg.Balance = coord.Balance(c.balance)
	if b := cfg.Balance; b != coord.BalanceLoad && b != coord.BalanceWidth {
		return nil, cli.Usage(fmt.Errorf("--balance %q: want %q or %q", b, coord.BalanceLoad, coord.BalanceWidth))
	}
	if cfg.LoadReportInterval < 100*time.Millisecond {
		return nil, cli.Usage(fmt.Errorf("--load-report-interval %s: want at least 100ms", cfg.LoadReportInterval))
	}
	if cfg.MaxTxnOps < 8 {
		return nil, cli.Usage(fmt.Errorf("--max-txn-ops %d: want at least 8, the etcd server's --max-txn-ops (default %d)", cfg.MaxTxnOps, coord.DefaultMaxTxnOps))
	}
	ks, err := c.kafkaConn.Settings()
	if err != nil {
		return nil, err
	}
	cfg.Topics = c.topics
	cfg.AutoOffsetReset = consumer.OffsetReset(c.autoReset)
	cfg.RetentionLoss = consumer.RetentionLossPolicy(c.retentionLoss)
	cfg.Kafka = ks.With(nil)
	if _, ok := cfg.Kafka["log_level"]; !ok {
		cfg.Kafka["log_level"] = 4
	}
	if c.batchSize > 0 {
		cfg.MaxBatchSize, cfg.MaxBatchWait = c.batchSize, c.batchWait
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	if err := c.checkBatchFlags(); err != nil {
		return nil, cli.Usage(err)
	}
	if c.lab != nil {
		if err := c.lab.Check(c.deliver.url != ""); err != nil {
			return nil, cli.Usage(err)
		}
	}
	if c.deliverCfg, err = c.deliver.config(); err != nil {
		return nil, err
	}
	if needDeliver {
		return nil, cli.Usage(errors.New("--deliver URL is required: keyshare member hands each record to that HTTP(S) endpoint (docs/delivery.md); for simulated work, run keyshare-bench member"))
	}
	return ks, nil
}

// validate runs consumer.Config.Validate on the member's configuration
// (with a stand-in for the handler Run builds later) and words its error in
// flags.
func (c *Command) validate() error {
	v := c.cfg
	if c.batchSize > 0 {
		v.BatchHandler = func(context.Context, []*kafka.Message) []error { return nil }
	} else {
		v.Handler = func(context.Context, *kafka.Message) error { return nil }
	}
	if err := v.Validate(); err != nil {
		return cli.Usage(errors.New(flagError(err)))
	}
	return nil
}

var (
	// configParen is how coord's errors name a field: "(Config.SessionTTL,
	// default 10s)" or "(Config.MemberID)".
	configParen = regexp.MustCompile(`\s?\(Config\.(\w+)(, |\))`)
	// configField is a field named in the running text of an error:
	// "MaxInFlight", "Config.Topics", "Retry.MaxAttempts", or a Retry
	// field by its own name ("MaxBackoff").
	configField = func() *regexp.Regexp {
		var names []string
		for f := range configFlags {
			names = append(names, regexp.QuoteMeta(f))
			if short, ok := strings.CutPrefix(f, "Retry."); ok {
				names = append(names, short)
			}
		}
		// Longest first, so that MaxInFlightBytes is not read as MaxInFlight.
		slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
		return regexp.MustCompile(`\b(?:Config\.)?(` + strings.Join(names, "|") + `)\b`)
	}()
)

// flagError words a consumer.Config validation error in the member's
// flags: "--max-in-flight -3 must be at least --concurrency 16", or
// "--ttl: session TTL 5ns must be at least 1s (default 10s)".
func flagError(err error) string {
	msg := strings.TrimPrefix(err.Error(), consumer.ErrConfig.Error()+": ")
	msg = strings.TrimPrefix(msg, "coord: ")
	lead := ""
	if m := configParen.FindStringSubmatchIndex(msg); m != nil {
		field, sep := msg[m[2]:m[3]], msg[m[4]:m[5]]
		if flag, ok := configFlags[field]; ok {
			lead = flag + ": "
			repl := ""
			if sep == ", " {
				repl = " ("
			}
			msg = msg[:m[0]] + repl + msg[m[1]:]
		}
	}
	msg = configField.ReplaceAllStringFunc(msg, func(s string) string {
		s = strings.TrimPrefix(s, "Config.")
		if flag, ok := configFlags[s]; ok {
			return flag
		}
		return configFlags["Retry."+s]
	})
	return lead + msg
}

func (c *Command) checkBatchFlags() error {
	switch {
	case c.batchSize < 0:
		return fmt.Errorf("--batch-size %d: want 0 (one record per call) or a batch size of at least 1", c.batchSize)
	case c.batchSize > c.cfg.MaxInFlight:
		return fmt.Errorf("--batch-size %d exceeds --max-in-flight %d: a batch could never fill; lower --batch-size or raise --max-in-flight", c.batchSize, c.cfg.MaxInFlight)
	case c.batchWait < 0:
		return fmt.Errorf("--batch-wait %s: want a duration of 0 or more", c.batchWait)
	}
	return nil
}

// labFlagIn returns the first lab flag (labFlags) args give, without its
// dashes, or "".
func labFlagIn(args []string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if slices.Contains(labFlags, name) {
			return name
		}
	}
	return ""
}
