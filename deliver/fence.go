package deliver

import (
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/ledger"
)

// fence is what a request says about the range a record came through:
// its key hash always; its range and fencing token (the etcd revision at
// which the range was granted to this member) when known.
type fence struct {
	hash   uint32
	known  bool
	lo, hi uint64
	token  int64
}

// fenceOf is the one place that learns a record's range and fencing
// token. The consumer does not expose them to handlers yet: until it does,
// every record goes out with "range": null and "fence": null, and only its
// key hash. When it does, this function reads them from ctx.
func fenceOf(_ context.Context, m *kafka.Message) fence {
	return fence{hash: ledger.Hash(m.Key, int64(m.TopicPartition.Offset))}
}
