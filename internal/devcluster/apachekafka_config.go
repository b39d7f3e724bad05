package devcluster

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Writing a node's configuration and formatting its storage.

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
