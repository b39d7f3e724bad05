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
