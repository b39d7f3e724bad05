package deliver_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/deliver"
)

// A member whose records go to an HTTP endpoint, in batches of up to 100,
// with the endpoint's metrics labelled by group beside the member's.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"localhost:2379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer etcd.Close()

	cfg := consumer.DefaultConfig()
	cfg.Group = "orders-app"
	cfg.MemberID = "orders-app-1"
	cfg.Topics = []string{"orders"}
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": "localhost:9092"}
	cfg.DeadLetterTopic = "orders.dlq"
	ep, err := deliver.New(deliver.Config{URL: "http://127.0.0.1:8080/", MemberID: cfg.MemberID})
	if err != nil {
		log.Fatal(err)
	}
	defer ep.Close()
	cfg.BatchHandler = ep.BatchHandler()

	member, err := consumer.New(etcd, cfg)
	if err != nil {
		log.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	prometheus.WrapRegistererWith(prometheus.Labels{"group": cfg.Group}, reg).MustRegister(ep.Collector())
	_ = prometheus.Gatherers{member.Metrics(), reg} // serve these; ep.Ready() for readiness
	if err := member.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
