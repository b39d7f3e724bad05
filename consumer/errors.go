package consumer

import "errors"

// ErrBatchResults is matched (errors.Is) by the error recorded for every
// record of a batch whose BatchHandler returned the wrong number of results.
var ErrBatchResults = errors.New("consumer: BatchHandler returned the wrong number of results")

// ErrConfig is matched (errors.Is) by every configuration error.
var ErrConfig = errors.New("consumer: bad configuration")

// ErrPlainGroupLive means the group id has live members of a plain Kafka
// consumer group (classic or KIP-848 protocol). keyshare commits the group's
// offsets itself; two writers would fight over them, so it refuses to start.
var ErrPlainGroupLive = errors.New("consumer: the group id has live members of a plain Kafka consumer group")

// ErrFenced is what a handler returns (wrapped or as is) when a sink
// refused the record's fence (FenceOf): a later owner of some of the
// record's hash range has written through the sink, so this member must
// not. The record is not done: it is retried, with a fence read afresh,
// while the member works on it (its view of the assignment may be catching
// up), and never dead-lettered; once its range is drained or dropped the
// member stops, and the range's next owner runs it.
var ErrFenced = errors.New("consumer: a sink refused the record's fence: a later owner of its range has written")
