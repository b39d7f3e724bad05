package consumer

import (
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/internal/schedule"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
)

// jobKey identifies the records that must run one at a time, in order: one
// key of one partition. Records with a null key have no order to keep, so
// each is its own key (by offset).
type jobKey struct {
	topic     string
	key       string
	offset    int64 // only for null keys
	partition int32
	// hash is the record key's ledger.Hash (of the offset, for a null
	// key): the scheduler finds a key's queue by it (Hash).
	hash uint32
	null bool
}

// Hash is the key's hash for the scheduler: its partition and its record
// key's hash, which the fetch loop has computed already. Keys of two
// topics may share it; the scheduler tells them apart.
func (k jobKey) Hash() uint64 { return uint64(uint32(k.partition))<<32 | uint64(k.hash) }

// keyedJobKey is the jobKey of the records of key (not null) in t.
func keyedJobKey(t tp, key []byte) jobKey {
	if key == nil {
		key = []byte{} // an empty key, as a record's: not the null key
	}
	return jobKey{topic: t.Topic, partition: t.Partition, key: string(key), hash: ledger.Hash(key, 0)}
}

// job is one record handed to a worker and not yet finished. One is
// allocated per record run: a byte saved here is a byte less for the
// collector per record (docs/benchmarks.md).
type job struct {
	key jobKey // its partition and its hash too (tp, hash)

	o   int64
	m   *kafka.Message
	ctx jobCtx // ends if the member must stop working on the record
	// p and w are for FenceOf (fence.go): the pipeline whose table holds
	// the record's range, and the range it was dispatched under.
	p *pipeline
	w *owned
	// queued is when the record was queued, as a duration after the
	// pipeline's epoch (since gives the time): 8 bytes where a time.Time
	// takes 24, which keeps a job in the allocator's 192-byte size class.
	queued time.Duration
	// notes are what few records need kept (jobNotes), under the
	// pipeline's lock: nil until a record needs them.
	notes *jobNotes
	// busy is how long the record has held a worker (load.go); written
	// by the worker running it, read when it finishes.
	busy time.Duration
	// prev and next link the in-flight records of the partition
	// (jobList), under the pipeline's lock.
	prev, next *job
}

// tp is the record's partition.
func (j *job) tp() tp { return tp{Topic: j.key.topic, Partition: j.key.partition} }

// since is when the record was queued.
func (j *job) since() time.Time { return j.p.epoch.Add(j.queued) }

// hash is the record's ledger.Hash: its key's, or its offset's for a
// null key.
func (j *job) hash() uint32 { return j.key.hash }

// jobNotes is what a job keeps only once it needs it: the attempts that
// failed and the last error, set by the worker retrying the record, and
// the operator's skip applied to it (keyops.go), whose deletion finish
// queues. Kept apart from job, so that a record that runs once costs a
// smaller one.
type jobNotes struct {
	attempts int
	lastErr  string
	skip     *coord.KeyOp
}

// notesLocked returns j's notes, made if it has none yet; under the
// pipeline's lock.
func (j *job) notesLocked() *jobNotes {
	if j.notes == nil {
		j.notes = new(jobNotes)
	}
	return j.notes
}

// failures returns how many attempts at the record failed, and the last
// error; under the pipeline's lock.
func (j *job) failures() (attempts int, lastErr string) {
	if j.notes == nil {
		return 0, ""
	}
	return j.notes.attempts, j.notes.lastErr
}

// cancel ends j's context: the member stops working on the record.
func (j *job) cancel() { j.ctx.cancel() }

// scheduler runs the member's records on its workers, one key at a time
// in offset order: a schedule.Scheduler, or with a BatchHandler a
// schedule.Batcher (batch.go). These are the calls the pipeline makes on
// either; the model tests step each through its own type.
type scheduler interface {
	// SubmitAll queues jobs[i], fetched at at, behind the earlier records
	// of key keys[i], unless the key is blocked with keep records queued
	// (blocked.go); queued[i] says which.
	SubmitAll(keys []jobKey, jobs []*job, keep int, at time.Time, queued []bool)
	// Queued and EvictBlocked: a key's queued records, and the blocked
	// keys' records taken out of memory (blocked.go).
	Queued(k jobKey) int
	EvictBlocked(keep int) []*job
	// Now is the clock that says when a key counts as blocked.
	Now() time.Time
	// Idle: no record queued or running.
	Idle() bool
	// Close stops the workers after the records they run.
	Close()
}

// batch is the records one batch-mode worker hands to the BatchHandler,
// and the keys it holds until it releases them.
type batch = schedule.Batch[jobKey, *job]
