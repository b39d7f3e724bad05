package devcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// ApacheKafkaOptions configures a real Apache Kafka cluster.
type ApacheKafkaOptions struct {
	// Dir holds the nodes' configuration, data and logs: node i (1-based
	// node.id) in Dir/node<i>, its broker log in Dir/node<i>/server.log.
	// Required. A Dir that already holds a formatted node is restarted
	// from its data (with the same cluster ID); otherwise it is formatted.
	Dir string
	// Nodes is the number of nodes, each a broker and a KRaft controller
	// (combined mode), so that any one of three can be killed and the
	// quorum lives on. Default 1.
	Nodes int
	// Addr is the host:port of the single node's client listener. Default
	// "127.0.0.1:0": a free port. Cannot be combined with Nodes > 1.
	Addr string
	// Topics to create, with their partition counts. Their replication
	// factor is min(3, Nodes).
	Topics map[string]int32
	// StartTimeout bounds the wait for every node to serve. Default 90 s.
	StartTimeout time.Duration
	// Logf, if set, hears what takes time (resolving jars, starting).
	Logf func(format string, args ...any)
}

// ApacheKafka is a running Apache Kafka cluster of ApacheKafkaVersion,
// one JVM per node, in KRaft combined mode on 127.0.0.1. Its nodes can be
// killed and restarted from their data. Its methods are safe for
// concurrent use.
type ApacheKafka struct {
	o         ApacheKafkaOptions
	java, lib string
	clusterID string

	mu    sync.Mutex
	nodes []*kafkaNode
}

// jvmFlags keep a node small and quick to start: a test broker holds little
// data, and the machine is shared. C1 only: far less JIT work at startup.
var jvmFlags = []string{"-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Djava.awt.headless=true"}

// StartApacheKafka formats (on first use) and starts o.Nodes Apache Kafka
// nodes on free ports, waits until every one serves, and creates o.Topics.
// It needs java 17+ on PATH, and Kafka's jars (KafkaJarDir: mvn on PATH
// the first time); without them it fails at once with what to install.
func StartApacheKafka(o ApacheKafkaOptions) (*ApacheKafka, error) {
	if o.Dir == "" {
		return nil, errors.New("devcluster: apache kafka needs a directory")
	}
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Nodes < 1 {
		return nil, fmt.Errorf("devcluster: apache kafka node count %d must be positive", o.Nodes)
	}
	if o.Nodes > 1 && o.Addr != "" {
		return nil, fmt.Errorf("devcluster: %d nodes cannot share the address %q: leave Addr empty for free ports", o.Nodes, o.Addr)
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 90 * time.Second
	}
	java, err := CheckJava()
	if err != nil {
		return nil, err
	}
	lib, err := KafkaJarDir(o.Logf)
	if err != nil {
		return nil, err
	}
	k := &ApacheKafka{o: o, java: java, lib: lib}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	if err := os.WriteFile(k.log4jConfig(), []byte(log4jConfig), 0o644); err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	err = k.start()
	var inUse portInUseError
	if errors.As(err, &inUse) && o.Addr == "" {
		// Another process took a port between freePorts and the JVM's
		// bind: try once more on fresh ports.
		err = k.start()
	}
	if err != nil {
		return nil, err
	}
	if len(o.Topics) > 0 {
		if err := k.CreateTopics(o.Topics); err != nil {
			k.Close()
			return nil, err
		}
	}
	return k, nil
}

// start configures, formats where needed, and starts every node.
func (k *ApacheKafka) start() error {
	n := k.o.Nodes
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	host := "127.0.0.1"
	if k.o.Addr != "" {
		h, p, err := net.SplitHostPort(k.o.Addr)
		if err != nil {
			return fmt.Errorf("devcluster: kafka address %q: want host:port", k.o.Addr)
		}
		port, err := strconv.Atoi(p)
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("devcluster: kafka address %q: bad port", k.o.Addr)
		}
		if port != 0 {
			ports[0] = port
		}
		if h != "" && h != "0.0.0.0" {
			host = h
		}
	}
	k.mu.Lock()
	k.nodes = nil
	var voters []string
	for i := range n {
		nd := &kafkaNode{id: i + 1, dir: filepath.Join(k.o.Dir, fmt.Sprintf("node%d", i+1)), host: host,
			port: ports[2*i], ctrlPort: ports[2*i+1], userChosenListen: i == 0 && k.o.Addr != ""}
		k.nodes = append(k.nodes, nd)
		voters = append(voters, fmt.Sprintf("%d@%s:%d", nd.id, host, nd.ctrlPort))
	}
	k.mu.Unlock()
	for _, nd := range k.nodes {
		if err := os.MkdirAll(nd.dir, 0o755); err != nil {
			return fmt.Errorf("devcluster: %w", err)
		}
		if err := os.WriteFile(nd.properties(), []byte(k.config(nd, strings.Join(voters, ","))), 0o644); err != nil {
			return fmt.Errorf("devcluster: %w", err)
		}
	}
	if err := k.format(); err != nil {
		return err
	}
	if k.o.Logf != nil {
		k.o.Logf("starting Apache Kafka %s (%d node(s)) in %s", ApacheKafkaVersion, n, k.o.Dir)
	}
	for _, nd := range k.nodes {
		if err := nd.start(k.java, k.lib, k.log4jConfig()); err != nil {
			k.Close()
			return err
		}
	}
	deadline := time.Now().Add(k.o.StartTimeout)
	for _, nd := range k.nodes {
		if err := k.waitServing(nd, deadline); err != nil {
			k.Close()
			return err
		}
	}
	if err := k.waitGroupCoordinator(deadline); err != nil {
		k.Close()
		return err
	}
	return nil
}

// waitGroupCoordinator waits until the cluster serves offset fetches of a
// consumer group. Kafka creates __consumer_offsets on the first request for
// a group coordinator and answers NOT_COORDINATOR or
// COORDINATOR_NOT_AVAILABLE until its partitions are led and loaded; a
// cluster that is "ready" should not answer its first users so.
func (k *ApacheKafka) waitGroupCoordinator(deadline time.Time) error {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers(), "group.id": "keyshare-devcluster-ready", "log_level": 0})
	if err != nil {
		return fmt.Errorf("devcluster: consumer: %w", err)
	}
	defer c.Close()
	topic := "keyshare-devcluster-ready"
	for {
		_, err := c.Committed([]kafka.TopicPartition{{Topic: &topic, Partition: 0}}, 5000)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devcluster: kafka group coordinator not available after %s: %w; see %s", k.o.StartTimeout, err, k.LogFiles()[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Brokers is the bootstrap list, "host:port,host:port,...".
func (k *ApacheKafka) Brokers() string { return strings.Join(k.ListenAddrs(), ",") }

// ListenAddrs are the nodes' client addresses, in node order. They do not
// change for the cluster's life, also across Restart.
func (k *ApacheKafka) ListenAddrs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, nd := range k.nodes {
		out = append(out, nd.addr())
	}
	return out
}

// Pids are the process ids of the nodes' JVMs, in node order; 0 for a
// node that is stopped. Benchmarks read the broker's CPU time from them.
func (k *ApacheKafka) Pids() []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]int, len(k.nodes))
	for i, nd := range k.nodes {
		if nd.proc != nil {
			out[i] = nd.proc.Pid
		}
	}
	return out
}

// LogFiles are the nodes' broker logs, in node order; they stay in Dir
// after Close.
func (k *ApacheKafka) LogFiles() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, nd := range k.nodes {
		out = append(out, nd.logPath())
	}
	return out
}

// Dir is the cluster's directory.
func (k *ApacheKafka) Dir() string { return k.o.Dir }

// Close stops every running node: SIGTERM, then SIGKILL after 15 s (a
// node of a multi-node cluster whose peers are gone cannot finish its
// controlled shutdown). The directory stays; the caller removes it.
func (k *ApacheKafka) Close() {
	k.mu.Lock()
	var wg sync.WaitGroup
	for _, nd := range k.nodes {
		if nd.proc == nil {
			continue
		}
		wg.Add(1)
		go func(p *os.Process, exited chan struct{}) {
			defer wg.Done()
			stopProc(p, exited, syscall.SIGTERM, 15*time.Second)
		}(nd.proc, nd.exited)
		nd.proc = nil
	}
	k.mu.Unlock()
	wg.Wait()
}

// CreateTopics creates topics with the given partition counts, replication
// factor min(3, nodes), and waits until every partition has a leader.
func (k *ApacheKafka) CreateTopics(topics map[string]int32) error {
	return CreateTopics(k.Brokers(), topics, min(3, k.o.Nodes))
}

// CreateTopics creates topics on the cluster at brokers through the admin
// API and waits (up to 60 s) until every partition has a leader.
func CreateTopics(brokers string, topics map[string]int32, replication int) error {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		return fmt.Errorf("devcluster: admin client: %w", err)
	}
	defer a.Close()
	var specs []kafka.TopicSpecification
	for t, n := range topics {
		if n <= 0 {
			return fmt.Errorf("devcluster: topic %q: partition count %d must be positive", t, n)
		}
		specs = append(specs, kafka.TopicSpecification{Topic: t, NumPartitions: int(n), ReplicationFactor: replication})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := a.CreateTopics(ctx, specs, kafka.SetAdminOperationTimeout(30*time.Second))
	if err != nil {
		return fmt.Errorf("devcluster: create topics: %w", err)
	}
	for _, r := range res {
		if r.Error.Code() != kafka.ErrNoError {
			return fmt.Errorf("devcluster: create topic %q: %w", r.Topic, r.Error)
		}
	}
	for t, n := range topics {
		for {
			md, err := a.GetMetadata(&t, false, 2000)
			ready := err == nil && md.Topics[t].Error.Code() == kafka.ErrNoError && len(md.Topics[t].Partitions) == int(n)
			if ready {
				for _, p := range md.Topics[t].Partitions {
					ready = ready && p.Leader >= 0 && p.Error.Code() == kafka.ErrNoError
				}
			}
			if ready {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("devcluster: topic %q: partitions without a leader after 60 s (last metadata error: %v)", t, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}
