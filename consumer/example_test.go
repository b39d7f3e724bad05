package consumer_test

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/devcluster"
)

// Example embeds a keyshare member in a service. The service already has an
// etcd client; here a throwaway etcd and an in-process Kafka-protocol broker
// stand in for the real ones.
func Example() {
	dir, _ := os.MkdirTemp("", "keyshare-example-")
	defer os.RemoveAll(dir)
	etcd, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer etcd.Close()
	broker, err := devcluster.StartKafka(devcluster.KafkaOptions{Topics: map[string]int32{"orders": 1}})
	if err != nil {
		panic(err)
	}
	defer broker.Close()
	brokers := broker.ListenAddrs()[0]
	produceOrders(brokers, 10)

	// The service's etcd client.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL()}, Logger: zap.NewNop()})
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	handled := 0
	cfg := consumer.DefaultConfig()
	cfg.Group = "orders-app"
	cfg.Topics = []string{"orders"}
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3}
	cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
		// Records of one key arrive here one at a time, in offset order.
		mu.Lock()
		defer mu.Unlock()
		handled++
		if handled == 10 {
			stop() // a real service stops on SIGTERM instead
		}
		return nil
	}
	c, err := consumer.New(cli, cfg)
	if err != nil {
		panic(err)
	}
	if err := c.Run(ctx); err != nil { // blocks; leaves gracefully when ctx ends
		panic(err)
	}
	fmt.Println("handled", handled, "records")
	// Output: handled 10 records
}

func produceOrders(brokers string, n int) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "log_level": 3})
	if err != nil {
		panic(err)
	}
	defer p.Close()
	topic := "orders"
	acks := make(chan kafka.Event, n)
	for i := range n {
		_ = p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: fmt.Appendf(nil, "customer-%d", i%3), Value: []byte("order")}, acks)
	}
	for range n {
		if m := (<-acks).(*kafka.Message); m.TopicPartition.Error != nil {
			panic(m.TopicPartition.Error)
		}
	}
}
