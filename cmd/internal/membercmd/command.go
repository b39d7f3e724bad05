package membercmd

import (
	"context"
	"errors"
	"flag"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/deliver"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/statestore"
)

// Command is the member command: its flags, their checks and its run.
type Command struct {
	// lab is keyshare-bench's addition (lab.go); nil in the product.
	lab Lab

	etcdConn                       clientflags.Etcd
	kafkaConn                      clientflags.Kafka
	logLevel, logFormat, autoReset string
	retentionLoss, balance         string
	topics                         cli.List
	batchSize                      int
	batchWait                      time.Duration
	deliver                        deliverFlags // deliver.go
	// deliverCfg is the endpoint's configuration when --deliver is set.
	deliverCfg deliver.Config
	// cfg is the consumer's configuration: the flags of flags.go set its
	// fields, config fills in the rest.
	cfg consumer.Config
}

// New returns the member command. The product (keyshare member) passes a
// nil lab and delivers every record to --deliver; keyshare-bench passes
// its lab, whose handler runs when --deliver is not given.
func New(lab Lab) *Command { return &Command{lab: lab} }

func (c *Command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("member", flag.ContinueOnError)
	c.cfg = consumer.DefaultConfig()
	c.kafkaConn.Register(fs, clientflags.DefaultBrokers, "Kafka bootstrap servers")
	c.etcdConn.Register(fs)
	fs.Var(&c.topics, "topic", "topic to consume (repeatable, at least one)")
	fs.IntVar(&c.batchSize, "batch-size", 0, "hand records to the handler in batches of up to N (any keys, per-key order kept); 0 handles one record per call")
	fs.DurationVar(&c.batchWait, "batch-wait", 10*time.Millisecond, "with --batch-size: how long a batch waits for more records once it has one")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: "+strings.Join(cli.LogLevels, ", "))
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text, or json (one JSON object per line)")
	c.deliver.register(fs)
	c.registerConfigFlags(fs) // flags.go
	if c.lab != nil {
		c.lab.Register(fs)
	}
	return fs
}

// Run runs the member until ctx ends (SIGINT or SIGTERM), which leaves
// the group gracefully.
func (c *Command) Run(ctx context.Context, args []string) error {
	ks, err := c.parse(args) // flags.go: every check that needs no network
	if err != nil {
		return err
	}
	log, err := cli.NewLogger("keyshare", c.logLevel, c.logFormat)
	if err != nil {
		return cli.Usage(err)
	}
	cfg := c.cfg
	cfg.Logger = log
	if cfg.MemberID == "" {
		cfg.MemberID = coord.DefaultMemberID() // the handler is told it
	}
	etcdCfg, err := c.etcdConn.Config()
	if err != nil {
		return err
	}
	var sim LabRun
	if c.lab != nil {
		if sim, err = c.lab.Start(cfg.MemberID, c.deliver.url != ""); err != nil {
			return err
		}
		defer sim.Close()
		etcdCfg.DialOptions = append(etcdCfg.DialOptions, sim.DialOptions...)
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
	etcd, err := c.etcdConn.Connect(ctx, etcdCfg, schema.Group{Prefix: cfg.Prefix, Name: cfg.Group}.Keys().Root())
	if err != nil {
		return err
	}
	defer etcd.Close()
	if c.deliver.url != "" {
		return c.runDelivering(ctx, etcd, cfg, ks)
	}
	if c.batchSize > 0 {
		cfg.BatchHandler = sim.BatchHandler
	} else {
		cfg.Handler = sim.Handler
	}
	self, err := consumer.New(etcd, cfg)
	if err != nil {
		return err
	}
	log.Info("member starting", "id", self.ID(), "group", cfg.Group, "topics", strings.Join(cfg.Topics, ","), "batch_size", c.batchSize)
	return ks.Explain(self.Run(ctx))
}

// runDelivering runs the member with the --deliver endpoint as its
// handler.
func (c *Command) runDelivering(ctx context.Context, etcd *clientv3.Client, cfg consumer.Config, ks *clientflags.KafkaSettings) error {
	dcfg := c.deliverCfg
	dcfg.MemberID = cfg.MemberID
	dcfg.Logger = cfg.Logger.Named("deliver")
	var store *statestore.Store
	if c.deliver.state {
		var err error
		if store, err = openState(ctx, cfg, c.deliver.stateDir); err != nil { // state.go
			return err
		}
		defer store.Close() // after the consumer's Run, the last deferred call
		dcfg.KeyState = keyStateOf
	}
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
	if store != nil {
		withState(store, &cfg)
	}
	metricsAddr := cfg.MetricsAddr
	cfg.MetricsAddr = "" // served below, with the endpoint's metrics and readiness
	self, err := consumer.New(etcd, cfg)
	if err != nil {
		return err
	}
	if store != nil {
		go store.Track(ctx, self) // ends with ctx, or with the Store's Close
	}
	if metricsAddr != "" {
		stop, err := serveDeliverMetrics(ctx, metricsAddr, cfg.Group, self, ep, store)
		if err != nil {
			return err
		}
		defer stop()
	}
	cfg.Logger.Info("member starting", "id", self.ID(), "group", cfg.Group, "topics", strings.Join(cfg.Topics, ","),
		"batch_size", c.batchSize, "deliver", textsafe.Escape(ep.String()), "state", c.deliver.state)
	return ks.Explain(self.Run(ctx))
}
