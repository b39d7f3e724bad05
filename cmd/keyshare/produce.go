package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/clientflags"
	"github.com/keyshare/keyshare/cmd/internal/loadgen"
)

type produceCommand struct {
	kafkaConn   clientflags.Kafka
	topic       string
	count, keys int
	zipf        float64
	rate        float64
	seed        uint64
	firstSeq    int
	quiet       bool
}

func (c *produceCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	c.kafkaConn.Register(fs, clientflags.DefaultBrokers, "Kafka bootstrap servers")
	fs.StringVar(&c.topic, "topic", "", "topic to write to (required)")
	fs.IntVar(&c.count, "count", 10000, "records to write")
	fs.IntVar(&c.keys, "keys", 100, "distinct keys (key-0 … key-N-1)")
	fs.Float64Var(&c.zipf, "zipf", 0, "Zipf exponent s > 1 for skewed keys (0: uniform)")
	fs.Float64Var(&c.rate, "rate", 0, "records per second (0: as fast as possible)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the key choice; a run with the same seed writes the same keys in the same order (default: random, printed)")
	fs.IntVar(&c.firstSeq, "first-seq", 0, "each key's first SEQ; the last run printed the value that writes no value again")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress output")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if !flagSet(fs, "seed") {
		c.seed = rand.Uint64()
	}
	switch {
	case c.topic == "":
		return cli.Usage(fmt.Errorf("--topic is required"))
	case c.count < 0 || c.keys <= 0:
		return cli.Usage(fmt.Errorf("--count %d and --keys %d: want count ≥ 0 and keys ≥ 1", c.count, c.keys))
	case c.zipf != 0 && c.zipf <= 1:
		return cli.Usage(fmt.Errorf("--zipf %g: the exponent must be greater than 1", c.zipf))
	case c.rate < 0:
		return cli.Usage(fmt.Errorf("--rate %g must not be negative", c.rate))
	case c.firstSeq < 0:
		return cli.Usage(fmt.Errorf("--first-seq %d must not be negative", c.firstSeq))
	}
	ks, err := c.kafkaConn.Settings()
	if err != nil {
		return err
	}
	cm := ks.ProducerConfig()
	for k, v := range (kafka.ConfigMap{"acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3}) {
		if _, ok := cm[k]; !ok {
			cm[k] = v
		}
	}
	res, err := loadgen.ProduceWith(ctx, cm, c.topic, loadgen.Options{
		Count: c.count, Keys: c.keys, Zipf: c.zipf, Rate: c.rate,
		Seed: c.seed, FirstSeq: c.firstSeq, Progress: produceProgress(c.quiet, stderrIsTerminal()),
	})
	fmt.Printf("produced %d records to %s (--seed %d repeats these keys; --first-seq %d goes on with new values)\n", res.Acked, c.topic, c.seed, res.NextSeq)
	return ks.Explain(err)
}

// produceProgress is how produce shows its progress: a bar redrawn in
// place on a terminal, a line per update in a file or a pipe (where a
// carriage return would pile them onto one line), none with --quiet.
func produceProgress(quiet, terminal bool) loadgen.Progress {
	switch {
	case quiet:
		return loadgen.NoProgress
	case terminal:
		return loadgen.ProgressBar
	}
	return loadgen.ProgressLines
}

func stderrIsTerminal() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
}

// flagSet reports whether the command line (or the environment) set flag
// name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
