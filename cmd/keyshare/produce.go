package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/internal/cli"
	"github.com/keyshare/keyshare/internal/loadgen"
)

type produceCommand struct {
	kafkaConn   kafkaFlags
	topic       string
	count, keys int
	zipf        float64
	rate        float64
	quiet       bool
}

func (c *produceCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("produce", flag.ContinueOnError)
	c.kafkaConn.register(fs, "127.0.0.1:9092", "Kafka bootstrap servers")
	fs.StringVar(&c.topic, "topic", "", "topic to write to (required)")
	fs.IntVar(&c.count, "count", 10000, "records to write")
	fs.IntVar(&c.keys, "keys", 100, "distinct keys (key-0 … key-N-1)")
	fs.Float64Var(&c.zipf, "zipf", 0, "Zipf exponent s > 1 for skewed keys (0: uniform)")
	fs.Float64Var(&c.rate, "rate", 0, "records per second (0: as fast as possible)")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress output")
	if err := cli.Parse(fs, args); err != nil {
		return err
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
	}
	ks, err := c.kafkaConn.settings()
	if err != nil {
		return err
	}
	cm := producerConfig(ks.m)
	for k, v := range (kafka.ConfigMap{"acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3}) {
		if _, ok := cm[k]; !ok {
			cm[k] = v
		}
	}
	n, err := loadgen.ProduceWith(ctx, cm, c.topic, c.count, c.keys, c.zipf, c.rate, !c.quiet)
	fmt.Printf("produced %d records to %s\n", n, c.topic)
	return ks.explain(err)
}
