package devcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

type kafkaNode struct {
	id               int // node.id, 1-based
	dir              string
	host             string
	port, ctrlPort   int
	proc             *os.Process // nil while stopped
	exited           chan struct{}
	waitErr          error
	userChosenListen bool
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

// format writes each node's meta.properties and bootstrap metadata with
// kafka.tools.StorageTool, unless the node was formatted before (a restart
// from Dir): then its cluster ID is kept.
func (k *ApacheKafka) format() error {
	for _, nd := range k.nodes {
		if b, err := os.ReadFile(filepath.Join(nd.dataDir(), "meta.properties")); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(l, "cluster.id="); ok {
					k.clusterID = strings.TrimSpace(v)
				}
			}
		}
	}
	if k.clusterID == "" {
		k.clusterID = newClusterID()
	}
	for _, nd := range k.nodes {
		if _, err := os.Stat(filepath.Join(nd.dataDir(), "meta.properties")); err == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		args := append([]string{"-Xmx256m"}, jvmFlags...)
		args = append(args, "-cp", filepath.Join(k.lib, "*"), "-Dlog4j2.configurationFile="+k.log4jConfig(),
			"kafka.tools.StorageTool", "format", "--cluster-id", k.clusterID, "--config", nd.properties(), "--ignore-formatted")
		out, err := exec.CommandContext(ctx, k.java, args...).CombinedOutput()
		cancel()
		if err != nil {
			return fmt.Errorf("devcluster: format kafka node %d in %s: %w\n%s", nd.id, nd.dir, err, out)
		}
	}
	return nil
}

// newClusterID is a random KRaft cluster ID: 16 bytes, base64url without
// padding, not starting with '-' (the command line would read it as a flag).
func newClusterID() string {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		if id := base64.RawURLEncoding.EncodeToString(b[:]); id[0] != '-' {
			return id
		}
	}
}

// config is node nd's server.properties: one combined node of a static
// KRaft quorum (controller.quorum.voters), settings for a small test
// cluster.
func (k *ApacheKafka) config(nd *kafkaNode, voters string) string {
	rf := min(3, k.o.Nodes)
	return fmt.Sprintf(`# Written by keyshare's devcluster for Apache Kafka %[1]s.
process.roles=broker,controller
node.id=%[2]d
controller.quorum.voters=%[3]s
listeners=PLAINTEXT://%[4]s:%[5]d,CONTROLLER://%[4]s:%[6]d
advertised.listeners=PLAINTEXT://%[4]s:%[5]d
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=%[7]s
num.partitions=1
default.replication.factor=%[8]d
min.insync.replicas=1
offsets.topic.replication.factor=%[8]d
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=%[8]d
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=%[8]d
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=4
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
background.threads=4
# A killed node loses its partitions' leadership after 3 s, not 9.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=3000
`, ApacheKafkaVersion, nd.id, voters, nd.host, nd.port, nd.ctrlPort, nd.dataDir(), rf)
}

// log4jConfig sends the broker's log (Info, Kafka's default) to stdout,
// which start appends to the node's server.log.
const log4jConfig = `status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.statechange.name = state.change.logger
logger.statechange.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
`

func (k *ApacheKafka) log4jConfig() string { return filepath.Join(k.o.Dir, "log4j2.properties") }

func (nd *kafkaNode) properties() string { return filepath.Join(nd.dir, "server.properties") }
func (nd *kafkaNode) dataDir() string    { return filepath.Join(nd.dir, "data") }
func (nd *kafkaNode) logPath() string    { return filepath.Join(nd.dir, "server.log") }
func (nd *kafkaNode) addr() string       { return net.JoinHostPort(nd.host, strconv.Itoa(nd.port)) }

// start starts the node's JVM, its output appended to server.log. The JVM
// is killed if this process dies (Pdeathsig); Pdeathsig fires when the
// thread that started the child exits, so that thread is locked to a
// goroutine that lives as long as the child. The JVM gets its own process
// group, so a terminal's Ctrl-C reaches only keyshare, which then stops it.
func (nd *kafkaNode) start(java, lib, log4j string) error {
	logf, err := os.OpenFile(nd.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("devcluster: %w", err)
	}
	args := append([]string{"-Xmx512m"}, jvmFlags...)
	args = append(args, "-cp", filepath.Join(lib, "*"), "-Dlog4j2.configurationFile="+log4j, "kafka.Kafka", nd.properties())
	cmd := exec.Command(java, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer logf.Close()
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("devcluster: start kafka node %d (%s): %w", nd.id, java, err)
			return
		}
		started <- nil
		err := cmd.Wait()
		nd.waitErr = err // read only after exited is closed
		close(exited)
	}()
	if err := <-started; err != nil {
		return err
	}
	nd.proc, nd.exited = cmd.Process, exited
	return nil
}

// portInUseError: a node could not bind its ports.
type portInUseError struct{ error }

// waitServing waits until node nd accepts connections and the cluster's
// metadata lists it, or its JVM exits, or deadline passes.
func (k *ApacheKafka) waitServing(nd *kafkaNode, deadline time.Time) error {
	k.mu.Lock()
	exited := nd.exited
	k.mu.Unlock()
	fail := func(what string) error {
		tail := logTail(nd.logPath(), 30)
		err := fmt.Errorf("devcluster: kafka node %d on %s %s; its log is %s, ending:\n%s", nd.id, nd.addr(), what, nd.logPath(), tail)
		if strings.Contains(tail, "Address already in use") && !nd.userChosenListen {
			return portInUseError{err}
		}
		if strings.Contains(tail, "Address already in use") {
			return fmt.Errorf("%w (is the port in use? choose another address)", err)
		}
		return err
	}
	// until polls cond every 100 ms until it holds, the JVM exits, or the
	// deadline passes (then the failure says what was not reached).
	until := func(what string, cond func() bool) error {
		for {
			select {
			case <-exited:
				return fail(fmt.Sprintf("exited while starting (%v)", nd.waitErr))
			default:
			}
			if time.Now().After(deadline) {
				return fail(fmt.Sprintf("%s after %s", what, k.o.StartTimeout))
			}
			if cond() {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := until("not serving", func() bool {
		c, err := net.DialTimeout("tcp", nd.addr(), time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		return err
	}
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": nd.addr(), "log_level": 0})
	if err != nil {
		return fmt.Errorf("devcluster: admin client: %w", err)
	}
	defer a.Close()
	return until("not in the cluster's metadata", func() bool {
		md, err := a.GetMetadata(nil, false, 2000)
		if err != nil {
			return false
		}
		for _, b := range md.Brokers {
			if int(b.ID) == nd.id {
				return true
			}
		}
		return false
	})
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
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

func (k *ApacheKafka) node(i int) (*kafkaNode, error) {
	if i < 0 || i >= len(k.nodes) {
		return nil, fmt.Errorf("devcluster: no kafka node %d (there are %d, numbered from 0)", i, len(k.nodes))
	}
	return k.nodes[i], nil
}

// Kill stops node i (0-based) as a crash would: SIGKILL. Its data stays
// for Restart.
func (k *ApacheKafka) Kill(i int) error { return k.stop(i, syscall.SIGKILL, 0) }

// Stop stops node i gracefully (SIGTERM: controlled shutdown), killing it
// if it has not exited within 30 s.
func (k *ApacheKafka) Stop(i int) error { return k.stop(i, syscall.SIGTERM, 30*time.Second) }

func (k *ApacheKafka) stop(i int, sig syscall.Signal, grace time.Duration) error {
	k.mu.Lock()
	nd, err := k.node(i)
	if err != nil {
		k.mu.Unlock()
		return err
	}
	proc, exited := nd.proc, nd.exited
	nd.proc = nil
	k.mu.Unlock()
	if proc == nil {
		return fmt.Errorf("devcluster: kafka node %d is already stopped", i)
	}
	stopProc(proc, exited, sig, grace)
	return nil
}

func stopProc(p *os.Process, exited chan struct{}, sig syscall.Signal, grace time.Duration) {
	_ = p.Signal(sig)
	if sig != syscall.SIGKILL {
		select {
		case <-exited:
			return
		case <-time.After(grace):
		}
		_ = p.Kill()
	}
	<-exited
}

// Restart starts stopped node i again from its data on its old ports and
// waits until it serves.
func (k *ApacheKafka) Restart(i int) error {
	k.mu.Lock()
	nd, err := k.node(i)
	if err == nil && nd.proc != nil {
		err = fmt.Errorf("devcluster: kafka node %d is running; Kill or Stop it before Restart", i)
	}
	if err == nil {
		err = nd.start(k.java, k.lib, k.log4jConfig())
	}
	k.mu.Unlock()
	if err != nil {
		return err
	}
	return k.waitServing(nd, time.Now().Add(k.o.StartTimeout))
}

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
