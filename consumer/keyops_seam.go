package consumer

import (
	"context"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer/internal/keyops"
)

// What the pipeline asks of the key operations' own logic
// (consumer/internal/keyops): the decisions on a key's operation, pure
// functions of it, and the Kafka I/O of its parks and preludes. The
// pipeline keeps the hook points: when a record meets its key's operation
// (keyops.go, park.go, parker.go, prelude.go), the locks, fences and
// tables around it.

// copyWriter writes a parked key's copies for its parker (parker.go), in
// the key's order, each record finished through the parker's queue
// (parkQueue) once its copy is acknowledged.
type copyWriter interface {
	// Step writes what the window allows and settles the oldest report;
	// keyops.StepIdle: nothing is queued nor on its way.
	Step() keyops.StepResult
	// Close closes the writer's producer.
	Close()
}

// partitionReader reads one partition for a prelude (prelude.go): an
// unpark's parking partition to its end, or a replay's origin to the
// replay's bound, in offset order.
type partitionReader interface {
	// Next returns the next record, nil at the end or the stop; a
	// replay whose records were deleted ends with a
	// *keyops.RecordsDeletedError.
	Next(ctx context.Context) (*kafka.Message, error)
	// Pos is the next offset it reads: the prelude's progress.
	Pos() int64
	Close()
}

// openPreludeReader reads topic/partition from from to stop (-1: its
// end) with a librdkafka consumer of the member's Kafka settings, logging
// to log what it cannot read.
func (c *Consumer) openPreludeReader(log hclog.Logger, topic string, partition int32, from, stop int64) (partitionReader, error) {
	rd, err := keyops.OpenReader(keyops.ReaderConfig(c.cfg.Kafka, c.cfg.Group), log, topic, partition, from, stop)
	if err != nil {
		return nil, err // not a nil *keyops.Reader in the interface
	}
	return rd, nil
}
