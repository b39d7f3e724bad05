package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/internal/devcluster"
)

type clusterCommand struct {
	etcdAddr, kafkaAddr, dataDir, kafka string
	topics                              cli.List
}

func (c *clusterCommand) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.etcdAddr, "etcd-addr", "127.0.0.1:2379", "etcd client address (host:port; port 0 picks a free one)")
	fs.StringVar(&c.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "Kafka broker address (kfake listens on 127.0.0.1; port 0 picks a free one)")
	cli.KafkaFlag(fs, &c.kafka)
	fs.StringVar(&c.dataDir, "data-dir", "", "directory to persist etcd and Kafka data across restarts (default: a temporary directory, removed on exit)")
	fs.Var(&c.topics, "topic", "topic to create, NAME:PARTITIONS (repeatable)")
}

// parseTopics reads NAME:PARTITIONS specs.
func parseTopics(specs []string) (map[string]int32, error) {
	out := make(map[string]int32)
	for _, s := range specs {
		name, n, ok := strings.Cut(s, ":")
		p, err := strconv.Atoi(n)
		if !ok || name == "" || err != nil || p <= 0 {
			return nil, cli.Usage(fmt.Errorf("--topic %q: want NAME:PARTITIONS with PARTITIONS ≥ 1, e.g. orders:3", s))
		}
		out[name] = int32(p)
	}
	return out, nil
}

func (c *clusterCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	c.flags(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if err := cli.CheckKafkaFlag(c.kafka); err != nil {
		return err
	}
	topics, err := parseTopics(c.topics)
	if err != nil {
		return err
	}
	s, err := devcluster.StartCluster(devcluster.ClusterOptions{EtcdAddr: c.etcdAddr, KafkaAddr: c.kafkaAddr, DataDir: c.dataDir, Kafka: c.kafka, Topics: topics})
	if err != nil {
		return err
	}
	defer s.Close()
	etcd, brokers := s.Etcd.ClientURL(), s.Brokers
	fmt.Printf("etcd:    %s\nbrokers: %s\n", etcd, brokers)
	for t, n := range topics {
		fmt.Printf("topic:   %s (%d partitions)\n", t, n)
	}
	fmt.Printf(`
Try next:
  keyshare produce --brokers %[2]s --topic TOPIC --count 10000 --keys 100
  keyshare member  --brokers %[2]s --etcd %[1]s --group demo --topic TOPIC --deliver http://127.0.0.1:8080/
                   (with an endpoint there, e.g. python3 cmd/keyshare/testdata/endpoint.py --port 8080: docs/delivery.md)
  keyshare status  --etcd %[1]s --brokers %[2]s --group demo
  go tool etcdctl --endpoints %[1]s get --prefix /keyshare/demo/

Running until interrupted (Ctrl-C).
`, etcd, brokers)
	<-ctx.Done()
	return nil
}
