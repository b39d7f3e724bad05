package coord

import (
	"context"
	"strings"

	"github.com/keyshare/keyshare/assign"
)

// Offsets is the group's offsets in Kafka, each call for many partitions at
// once (one request, or librdkafka's cache). The consumer package implements
// it with librdkafka; tests use an in-memory one. Every call must return by
// ctx's deadline.
type Offsets interface {
	// Committed returns the group's committed offset of each partition
	// (Offset -1 where the group has none) and who committed it. A
	// partition left out of the answer could not be read; with an error,
	// the answer holds what could.
	Committed(ctx context.Context, parts []assign.TopicPartition) (map[assign.TopicPartition]KafkaOffset, error)
	// Commit commits the offsets for the group in one call (an adapter
	// may send them as several requests at once), each with the
	// committing member's CommitMark as its metadata. It returns the
	// partitions Kafka refused, each with its error; an error means none
	// is known to be committed.
	Commit(ctx context.Context, offsets map[assign.TopicPartition]int64) (map[assign.TopicPartition]error, error)
	// Ends returns the log end offset of each partition it could learn.
	Ends(ctx context.Context, parts []assign.TopicPartition) (map[assign.TopicPartition]int64, error)
}

// KafkaOffset is a partition's committed offset in Kafka.
type KafkaOffset struct {
	Offset int64 // -1: the group has none
	// By is who committed it, as its metadata names it (CommitWriter):
	// a keyshare member, or keyshare group reset-offsets. Empty for a
	// commit without keyshare's mark: Kafka's own tools
	// (kafka-consumer-groups --reset-offsets), a plain consumer using the
	// group id, or a keyshare version that did not mark its commits.
	By string
}

// commitMarkPrefix starts the metadata of every offset keyshare commits.
const commitMarkPrefix = "keyshare:"

// CommitMark is the metadata keyshare commits to Kafka with each offset,
// naming the writer (a member id, or "keyshare group reset-offsets"). A
// commit round tells from it whether an offset it did not expect in Kafka
// came from keyshare (a deposed leader's late commit) or from outside (an
// operator's kafka-consumer-groups --reset-offsets), and says so.
func CommitMark(by string) string { return commitMarkPrefix + by }

// CommitWriter is the writer a committed offset's metadata names, "" if
// the metadata is not keyshare's mark.
func CommitWriter(metadata string) string {
	by, ok := strings.CutPrefix(metadata, commitMarkPrefix)
	if !ok {
		return ""
	}
	return by
}
