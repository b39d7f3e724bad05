package deliver

import (
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
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
// token: consumer.FenceOf, which knows them for a handler called by a
// consumer with the context it was given. Called any other way (a test, a
// service calling the handler itself) the record goes out with
// "range": null and "fence": null.
func fenceOf(ctx context.Context, m *kafka.Message) fence {
	f := fence{hash: ledger.Hash(m.Key, int64(m.TopicPartition.Offset))}
	if cf, ok := consumer.FenceOf(ctx, m); ok {
		f.known, f.lo, f.hi, f.token = true, cf.Lo, cf.Hi, cf.Token
	}
	return f
}
