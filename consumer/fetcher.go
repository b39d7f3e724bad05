package consumer

import "github.com/confluentinc/confluent-kafka-go/v2/kafka"

// fetcher is what a member's pipeline asks of its Kafka client: fetch the
// partitions it is told to, from the offsets it is told, and hand over
// records and events. It is all the pipeline uses of librdkafka, so the
// pipeline's drivers can run on an in-memory fetcher in unit tests
// (fakeFetcher in fetcher_test.go).
//
// The methods keep librdkafka's names and semantics, so *kafka.Consumer is
// the adapter as it is (the assertion below): partitions are assigned in
// assign mode, never through Kafka group membership, and kafka.TopicPartition
// and kafka.Event are the message types. The leader's offset commits, the
// start-up checks (metadata, committed offsets) and the log-offset reads
// (start offsets, retention) use the client directly, off the fetch loop,
// and are not part of this interface.
type fetcher interface {
	// IncrementalAssign starts fetching parts, each from its Offset.
	IncrementalAssign(parts []kafka.TopicPartition) error
	// IncrementalUnassign stops fetching parts.
	IncrementalUnassign(parts []kafka.TopicPartition) error
	// SeekPartitions moves the fetch position of assigned parts; it returns
	// once no record fetched before the seek can be delivered. A partition
	// that refuses the seek has its Error set in the result.
	SeekPartitions(parts []kafka.TopicPartition) ([]kafka.TopicPartition, error)
	// Poll returns the next record or event, or nil after timeoutMs.
	Poll(timeoutMs int) kafka.Event
	// Pause and Resume stop and restart fetching parts; the flag outlives
	// unassign and assign.
	Pause(parts []kafka.TopicPartition) error
	Resume(parts []kafka.TopicPartition) error
	// GetWatermarkOffsets is the partition's log bounds as the last fetch
	// answers said: no request is made (high is -1 before the first).
	GetWatermarkOffsets(topic string, partition int32) (low, high int64, err error)
}

// librdkafka is the adapter.
var _ fetcher = (*kafka.Consumer)(nil)
