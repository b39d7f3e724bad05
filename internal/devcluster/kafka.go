package devcluster

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// KafkaOptions configures the in-process Kafka-protocol broker.
type KafkaOptions struct {
	// Addr is the host:port to listen on. Default "127.0.0.1:0": a free
	// port. kfake always listens on 127.0.0.1; only the port is used.
	Addr string
	// DataDir persists the broker's logs and offsets; reuse it to restart
	// with the same data. Default: in memory.
	DataDir string
	// Topics to create, with their partition counts.
	Topics map[string]int32
	// Brokers is the number of brokers, each on a free port; partition
	// leadership is spread over them. Default 1. More than one cannot be
	// combined with Addr.
	Brokers int
	// Extra kfake options (faults, brokers configs) for tests.
	Extra []kfake.Opt
}

// StartKafka starts a kfake cluster (one broker unless o.Brokers says more).
// Its bootstrap list is strings.Join(c.ListenAddrs(), ",").
func StartKafka(o KafkaOptions) (*kfake.Cluster, error) {
	if o.Brokers > 1 && o.Addr != "" {
		return nil, fmt.Errorf("devcluster: %d brokers cannot share the address %q: leave Addr empty for free ports", o.Brokers, o.Addr)
	}
	port := 0
	if o.Addr != "" {
		_, p, err := net.SplitHostPort(o.Addr)
		if err != nil {
			return nil, fmt.Errorf("devcluster: kafka address %q: want host:port", o.Addr)
		}
		if port, err = strconv.Atoi(p); err != nil || port < 0 || port > 65535 {
			return nil, fmt.Errorf("devcluster: kafka address %q: bad port", o.Addr)
		}
	}
	opts := []kfake.Opt{kfake.Ports(port)}
	if o.Brokers > 1 {
		opts = []kfake.Opt{kfake.NumBrokers(o.Brokers)}
	}
	if o.DataDir != "" {
		opts = append(opts, kfake.DataDir(o.DataDir))
	}
	for topic, n := range o.Topics {
		if n <= 0 {
			return nil, fmt.Errorf("devcluster: topic %q: partition count %d must be positive", topic, n)
		}
		opts = append(opts, kfake.SeedTopics(n, topic))
	}
	opts = append(opts, o.Extra...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("devcluster: start kafka broker on port %d: %w (is the port in use? choose another address)", port, err)
	}
	return c, nil
}
