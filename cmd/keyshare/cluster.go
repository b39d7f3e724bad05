package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/keyshare/keyshare/internal/devcluster"
)

type clusterCommand struct {
	etcdAddr, kafkaAddr, dataDir, kafka string
	topics                              listFlag
}

// kafkaFlag registers --kafka, the broker of the bundled cluster.
func kafkaFlag(fs *flag.FlagSet, v *string) {
	fs.StringVar(v, "kafka", "kfake", "the bundled cluster's broker: kfake (in process, no dependencies) or apache (Apache Kafka "+devcluster.ApacheKafkaVersion+
		" in a JVM; needs java 17+, and mvn the first time to fetch its jars from Maven Central)")
}

func checkKafkaFlag(v string) error {
	if v != "kfake" && v != "apache" {
		return usageError{fmt.Errorf("--kafka %q: want kfake or apache", v)}
	}
	return nil
}

func (c *clusterCommand) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.etcdAddr, "etcd-addr", "127.0.0.1:2379", "etcd client address (host:port; port 0 picks a free one)")
	fs.StringVar(&c.kafkaAddr, "kafka-addr", "127.0.0.1:9092", "Kafka broker address (kfake listens on 127.0.0.1; port 0 picks a free one)")
	kafkaFlag(fs, &c.kafka)
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
			return nil, usageError{fmt.Errorf("--topic %q: want NAME:PARTITIONS with PARTITIONS ≥ 1, e.g. orders:3", s)}
		}
		out[name] = int32(p)
	}
	return out, nil
}

// started is a running bundled cluster.
type started struct {
	etcd       *devcluster.Etcd
	brokers    string
	closeKafka func()
	tmp        string
	// brokerPids are the broker's processes (Apache Kafka's JVMs); nil
	// for kfake, which runs in this process.
	brokerPids func() []int
}

func (s *started) close() {
	s.closeKafka()
	if s.etcd != nil {
		s.etcd.Close()
	}
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}

// startCluster starts etcd and the broker (backend "kfake" or "apache").
func startCluster(etcdAddr, kafkaAddr, dataDir, backend string, topics map[string]int32) (*started, error) {
	s := &started{closeKafka: func() {}}
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "keyshare-cluster-")
		if err != nil {
			return nil, err
		}
		dataDir, s.tmp = tmp, tmp
	}
	e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: filepath.Join(dataDir, "etcd"), ClientAddr: etcdAddr})
	if err != nil {
		s.close()
		return nil, err
	}
	s.etcd = e
	if backend == "apache" {
		// Its own directory: kfake's data files are not Kafka's.
		k, err := devcluster.StartApacheKafka(devcluster.ApacheKafkaOptions{Addr: kafkaAddr, Dir: filepath.Join(dataDir, "apache-kafka"), Topics: topics,
			Logf: func(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) }})
		if err != nil {
			s.close()
			return nil, err
		}
		s.brokers, s.closeKafka, s.brokerPids = k.Brokers(), k.Close, k.Pids
		return s, nil
	}
	k, err := devcluster.StartKafka(devcluster.KafkaOptions{Addr: kafkaAddr, DataDir: filepath.Join(dataDir, "kafka"), Topics: topics})
	if err != nil {
		s.close()
		return nil, err
	}
	s.brokers, s.closeKafka = k.ListenAddrs()[0], k.Close
	return s, nil
}

func (c *clusterCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	c.flags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkKafkaFlag(c.kafka); err != nil {
		return err
	}
	topics, err := parseTopics(c.topics)
	if err != nil {
		return err
	}
	s, err := startCluster(c.etcdAddr, c.kafkaAddr, c.dataDir, c.kafka, topics)
	if err != nil {
		return err
	}
	defer s.close()
	etcd, brokers := s.etcd.ClientURL(), s.brokers
	fmt.Printf("etcd:    %s\nbrokers: %s\n", etcd, brokers)
	for t, n := range topics {
		fmt.Printf("topic:   %s (%d partitions)\n", t, n)
	}
	fmt.Printf(`
Try next:
  keyshare produce --brokers %[2]s --topic TOPIC --count 10000 --keys 100
  keyshare member  --brokers %[2]s --etcd %[1]s --group demo --topic TOPIC --work 2ms
  keyshare status  --etcd %[1]s --brokers %[2]s --group demo
  go tool etcdctl --endpoints %[1]s get --prefix /keyshare/demo/

Running until interrupted (Ctrl-C).
`, etcd, brokers)
	<-ctx.Done()
	return nil
}
