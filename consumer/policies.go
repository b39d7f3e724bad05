package consumer

// OffsetReset is where a range starts when the group has no state for it
// and no committed offset (Config.AutoOffsetReset). The values are those of
// Kafka's auto.offset.reset, and of the CLI flag.
type OffsetReset string

const (
	// OffsetEarliest starts at the partition's log start.
	OffsetEarliest OffsetReset = "earliest"
	// OffsetLatest starts at the partition's log end (under read_committed,
	// the last stable offset, as for a Kafka consumer: a transaction open at
	// the start is read once it commits).
	OffsetLatest OffsetReset = "latest"
)

// RetentionLossPolicy is what a member does when Kafka deleted records its
// ranges had not handled (retention, DeleteRecords): Config.RetentionLoss.
type RetentionLossPolicy string

const (
	// RetentionLossReport moves the ranges past the deleted records with a
	// loss report in etcd (lost/...) and goes on from the log start.
	RetentionLossReport RetentionLossPolicy = "report"
	// RetentionLossHalt stops fetching the partition, holds its committed
	// offset and waits for an operator, as a plain consumer with
	// auto.offset.reset=none would.
	RetentionLossHalt RetentionLossPolicy = "halt"
)
