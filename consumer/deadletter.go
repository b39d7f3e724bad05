package consumer

import (
	"fmt"
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer/internal/deadletter"
)

// Dead-letter headers, written by keyshare on every dead letter. HeaderError
// holds the handler's error as text, Go-quoted if it has a non-printable
// character and cut to a few kilobytes. HeaderDropped is there only when the
// copy was too large for the dead-letter topic and went without its value
// ("value") or without its key, value and own headers ("key,value,headers");
// the original stays at HeaderTopic, HeaderPartition, HeaderOffset while
// the topic retains it. The copies are built and written by
// consumer/internal/deadletter (deadletter_seam.go): the names are its.
const (
	HeaderTopic     = deadletter.HeaderTopic     // "keyshare.topic"
	HeaderPartition = deadletter.HeaderPartition // "keyshare.partition"
	HeaderOffset    = deadletter.HeaderOffset    // "keyshare.offset"
	HeaderError     = deadletter.HeaderError     // "keyshare.error"
	HeaderAttempts  = deadletter.HeaderAttempts  // "keyshare.attempts"
	HeaderDropped   = deadletter.HeaderDropped   // "keyshare.dropped"
	// HeaderFence is on a parked copy only: the fencing token of the
	// range the member parked the record under (Fence.Token), by which an
	// unpark passes over a copy that a member which had lost the range
	// wrote late, behind the next owner's (park.go).
	HeaderFence = deadletter.HeaderFence // "keyshare.fence"
)

// RenamedHeaderPrefix goes in front of a record's own header whose name
// starts with keyshare's prefix "keyshare." (in any case) on its dead
// letter ("keyshare.offset" becomes "original.keyshare.offset"), so every
// header of a dead letter named keyshare.* was written by keyshare: a
// reader that takes the first header of a name cannot be handed a
// producer's forged offset or error.
const RenamedHeaderPrefix = deadletter.RenamedHeaderPrefix // "original."

// newDeadLetterProducer makes the dead-letter producer from the consumer's
// Kafka settings: every connection and security property (SASL, TLS,
// client.id, ...) the user gave, without the consumer-only ones, plus
// acks=all, idempotence, and one record per batch. Its librdkafka logs go
// to log.
func newDeadLetterProducer(user kafka.ConfigMap, log hclog.Logger) (*kafka.Producer, chan struct{}, error) {
	pm := ProducerConfig(user)
	pm["acks"] = "all"
	pm["enable.idempotence"] = true
	// A broker checks a batch against the topic's max.message.bytes as a
	// whole: a small copy batched with a large dead letter of another key
	// would be refused with it, and sent without its value for nothing.
	// Dead letters are few; each waits for its ack anyway.
	pm["batch.num.messages"] = 1
	pm["go.logs.channel.enable"] = true
	p, err := kafka.NewProducer(&pm)
	if err != nil {
		return nil, nil, fmt.Errorf("consumer: create dead-letter producer: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ForwardLogs(log, p.Logs())
	}()
	return p, done, nil
}

// ProducerConfig returns a copy of a consumer's librdkafka settings fit for
// a producer on the same cluster: the same connection and security
// properties, without librdkafka's consumer-only ones (which a producer
// would warn about) and without the go.* channel settings of the consumer.
func ProducerConfig(m kafka.ConfigMap) kafka.ConfigMap {
	out := kafka.ConfigMap{}
	for k, v := range m {
		if !ConsumerOnly(k) {
			out[k] = v
		}
	}
	return out
}

// ConsumerOnly reports whether k is a librdkafka consumer-scope property
// (or a confluent-kafka-go consumer setting).
func ConsumerOnly(k string) bool {
	for _, p := range []string{"fetch.", "group.", "auto.commit.", "offset.store.", "go."} {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	switch k {
	case "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset", "session.timeout.ms", "heartbeat.interval.ms",
		"max.poll.interval.ms", "isolation.level", "partition.assignment.strategy", "check.crcs", "queued.min.messages",
		"queued.max.messages.kbytes", "enable.partition.eof", "consume.callback.max.messages", "coordinator.query.interval.ms",
		"rebalance_cb", "offset_commit_cb", "consume_cb":
		return true
	}
	return false
}
