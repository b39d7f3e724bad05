// Package consumer is keyshare's Kafka side: a member that shares the
// partitions of its topics with the other members of its group by key-hash
// range, handles records one key at a time in offset order (keys in
// parallel), records completion in etcd in fenced transactions, and — on the
// leader — commits each partition's safe offset to Kafka.
//
//	cfg := consumer.DefaultConfig()
//	cfg.Group = "orders-app"
//	cfg.Topics = []string{"orders"}
//	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": "localhost:9092"}
//	cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
//		return apply(ctx, m) // one key at a time, in offset order
//	}
//	c, err := consumer.New(etcdClient, cfg)
//	if err != nil { ... }
//	err = c.Run(ctx) // blocks; when ctx ends it hands its ranges over and returns
//
// See docs/consumer.md for the configuration, the guarantees and how they
// are kept.
package consumer
