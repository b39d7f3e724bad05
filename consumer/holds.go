package consumer

// holds are the reasons the member takes no records, or none of some
// partitions. The pipeline holds them under p.mu.
type holds struct {
	// paused: the fetch loop paused the partitions in librdkafka, at an
	// in-flight bound or held (backpressure.go).
	paused bool
	// held: an operator paused the group (state.PauseRecord), or the
	// pause state is not read yet; the member takes no records.
	held      bool
	heldKnown bool // the pause state has been read once
	// halted are partitions whose unhandled records Kafka deleted, held
	// for an operator (RetentionLoss "halt").
	halted map[tp]bool
}
