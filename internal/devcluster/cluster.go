package devcluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// EtcdAddr and KafkaAddr are the client addresses (host:port; port 0
	// picks a free one).
	EtcdAddr, KafkaAddr string
	// DataDir keeps etcd's and the broker's data; "" is a temporary
	// directory that Close removes.
	DataDir string
	// Kafka is the broker: "kfake" (in this process) or "apache" (Apache
	// Kafka ApacheKafkaVersion in a JVM).
	Kafka string
	// Topics are created at the start, name → partitions.
	Topics map[string]int32
}

// Cluster is the bundled cluster of `keyshare cluster`, `keyshare demo`
// and the benchmarks: an embedded etcd and one broker.
type Cluster struct {
	Etcd    *Etcd
	Brokers string
	// BrokerPids are the broker's processes (Apache Kafka's JVMs); nil
	// for kfake, which runs in this process.
	BrokerPids func() []int

	closeKafka func()
	tmp        string
}

// Close stops the broker and etcd, and removes the temporary data
// directory if StartCluster made one.
func (c *Cluster) Close() {
	c.closeKafka()
	if c.Etcd != nil {
		c.Etcd.Close()
	}
	if c.tmp != "" {
		_ = os.RemoveAll(c.tmp)
	}
}

// StartCluster starts etcd and the broker of o.Kafka.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	s := &Cluster{closeKafka: func() {}}
	dataDir := o.DataDir
	if dataDir == "" {
		tmp, err := os.MkdirTemp("", "keyshare-cluster-")
		if err != nil {
			return nil, err
		}
		dataDir, s.tmp = tmp, tmp
	}
	e, err := StartEtcd(EtcdOptions{Dir: filepath.Join(dataDir, "etcd"), ClientAddr: o.EtcdAddr})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Etcd = e
	if o.Kafka == "apache" {
		// Its own directory: kfake's data files are not Kafka's.
		k, err := StartApacheKafka(ApacheKafkaOptions{Addr: o.KafkaAddr, Dir: filepath.Join(dataDir, "apache-kafka"), Topics: o.Topics,
			Logf: func(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) }})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.Brokers, s.closeKafka, s.BrokerPids = k.Brokers(), k.Close, k.Pids
		return s, nil
	}
	k, err := StartKafka(KafkaOptions{Addr: o.KafkaAddr, DataDir: filepath.Join(dataDir, "kafka"), Topics: o.Topics})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.Brokers, s.closeKafka = k.ListenAddrs()[0], k.Close
	return s, nil
}
