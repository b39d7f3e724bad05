package consumer_test

import (
	"context"
	"errors"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
)

// bulkSink stands for a database or bulk API that takes many rows per call.
type bulkSink struct{}

// Upsert applies rows in order, skipping a key's rows after its first
// failed row, and reports the failed rows; err means the whole call failed.
func (bulkSink) Upsert(ctx context.Context, keys, values [][]byte) (failed map[int]error, err error) {
	return nil, nil
}

// ExampleBatchHandler writes records to a sink that pays per call. Each
// record gets its own result. A record that follows a failed record of its
// key must not be applied (the sink skips it here): its result is discarded
// and it runs again after the failed one.
func ExampleBatchHandler() {
	var sink bulkSink
	cfg := consumer.DefaultConfig()
	cfg.Group, cfg.Topics = "orders-app", []string{"orders"}
	cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": "kafka:9092"}
	cfg.MaxBatchSize, cfg.MaxBatchWait = 500, 20*time.Millisecond
	cfg.BatchHandler = func(ctx context.Context, batch []*kafka.Message) []error {
		results := make([]error, len(batch))
		var keys, values [][]byte
		var idx []int // batch index of each row sent
		failedKey := map[string]bool{}
		for i, m := range batch {
			keys, values, idx = append(keys, m.Key), append(values, m.Value), append(idx, i)
		}
		failed, err := sink.Upsert(ctx, keys, values)
		if err != nil {
			return consumer.FailAll(len(batch), err) // retried, each record alone
		}
		for row, i := range idx {
			k := string(batch[i].Key)
			switch {
			case failedKey[k]:
				results[i] = errors.New("skipped: an earlier record of this key failed")
			case failed[row] != nil:
				results[i], failedKey[k] = failed[row], true
			}
		}
		return results
	}
	_ = cfg // consumer.New(cli, cfg), then Run, as in Example
}
