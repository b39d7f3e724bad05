package consumer_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/consumer"
)

// Example embeds a keyshare member in a service. The service already has an
// etcd client and Kafka brokers; here an embedded etcd and kfake, an
// in-process Kafka-protocol broker, stand in for them (startEtcd and
// startKafka below), so the example runs as it is.
func Example() {
	etcdURL, stopEtcd := startEtcd()
	defer stopEtcd()
	brokers, stopKafka := startKafka("orders")
	defer stopKafka()
	produceOrders(brokers, 10)

	// The service's etcd client.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, Logger: zap.NewNop()})
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

// startEtcd starts a single-node etcd on free ports in a temporary
// directory.
func startEtcd() (clientURL string, stop func()) {
	dir, err := os.MkdirTemp("", "keyshare-example-")
	if err != nil {
		panic(err)
	}
	free, _ := url.Parse("http://127.0.0.1:0")
	cfg := embed.NewConfig()
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*free}, []url.URL{*free}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*free}, []url.URL{*free}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		panic(err)
	}
	<-e.Server.ReadyNotify()
	return "http://" + e.Clients[0].Addr().String(), func() {
		e.Close()
		os.RemoveAll(dir)
	}
}

// startKafka starts a kfake broker with one single-partition topic.
func startKafka(topic string) (brokers string, stop func()) {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, topic))
	if err != nil {
		panic(err)
	}
	return c.ListenAddrs()[0], c.Close
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
