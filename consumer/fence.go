package consumer

import (
	"context"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Fence says under which grant of its hash range a member handles a
// record: a fencing token that a sink can check, so that a member that
// lost the range (paused past its lease, cut from etcd) cannot write over
// the range's next owner (docs/exactly-once.md).
//
// Token is the etcd revision at which the range record naming this member
// as the owner of [Lo, Hi) was last written, as the member read it (the
// ModRevision of ranges/<topic>/<partition>/<lo>). It is larger for every
// later owner of any of the range's hashes, because every change of owner
// writes a new range record, and etcd revisions only grow:
//
//   - a handoff (a join, a leave, a rebalance by load) rewrites the record
//     as revoking, then released by the owner (or, for a leave, written
//     active for the next owner by the leaver itself), then active for
//     the next owner: each write at a revision above the one before, and
//     each guarded by the revision of the record it replaces;
//   - a split writes each part as a new record, a merge writes the merged
//     record and deletes the others, in one transaction each, guarded by
//     the revisions of the records they replace;
//   - a failover (the owner's session gone) writes the next owners'
//     records after the dead owner's registration is gone;
//   - an operator's reset rewrites every range record (with a new reset
//     epoch).
//
// So a record written for a later owner of hash h was written after the
// record the earlier owner held h under, and carries a larger revision.
// Two owners at once never share a token for overlapping hashes: records
// written in one transaction (a split, a failover cut into parts) do not
// overlap. A token can also grow while the owner stays the same (a revoke
// taken back, a reset, a split that leaves the record's hash with its
// owner); a sink only needs it never to go back for a later owner.
//
// A sink keeps, per topic and partition, the newest token seen for each
// range written through it, and refuses a write whose token is below the
// newest token of any range overlapping [Lo, Hi), in the same transaction
// as the write's effect (package pgsink does this for PostgreSQL).
type Fence struct {
	Topic     string
	Partition int32
	// Lo and Hi bound the range's key hashes: Lo <= hash < Hi
	// (ledger.Hash; Hi is at most ledger.HashSpace).
	Lo, Hi uint64
	Token  int64
}

// FenceOf returns the fence of record m: the range of the member's that
// holds it and that range's token. Call it from a Handler with the context
// it was given (or one derived from it), or from a BatchHandler with the
// batch's context for any message of the batch. It reports false for any
// other context or message.
//
// The range is the one that holds m's hash in the member's current view
// of its assignment, so a record in flight across a split gets the token
// of the part it is in; a record the member no longer holds (its range
// drained, dropped or reset) gets the range it was dispatched under, as the
// member last read it: below the token of whoever holds its hash now.
func FenceOf(ctx context.Context, m *kafka.Message) (Fence, bool) {
	if ctx == nil || m == nil || m.TopicPartition.Topic == nil {
		return Fence{}, false
	}
	src, ok := ctx.Value(fenceKey{}).(fenceSource)
	if !ok {
		return Fence{}, false
	}
	j := src.jobOf(m)
	if j == nil {
		return Fence{}, false
	}
	return j.p.fenceOf(j), true
}

// FenceOfKey returns the fence of the member's range of topic and
// partition that holds key's hash, for a handler of another topic's
// record: call it with the context a Handler or BatchHandler was given (or
// one derived from it). It reports false for any other context, and when
// the member holds no range of that partition holding the hash. With the
// topics co-partitioned (Config.CoPartitioned), the member that runs a
// record of one holds the same hash of the others' same partition, save
// while a range of one moves ahead of the other's.
func FenceOfKey(ctx context.Context, topic string, partition int32, key []byte) (Fence, bool) {
	if ctx == nil {
		return Fence{}, false
	}
	src, ok := ctx.Value(fenceKey{}).(fenceSource)
	if !ok {
		return Fence{}, false
	}
	p := src.pipeline()
	if p == nil {
		return Fence{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := holding(p.mu.byTP, tp{Topic: topic, Partition: partition}, ledger.Hash(key, 0))
	if w == nil {
		return Fence{}, false
	}
	return fenceFrom(w.rs), true
}

// fenceKey is the context key FenceOf asks for: a record's context
// (jobCtx) answers it without making its context.
type fenceKey struct{}

// fenceSource finds the job of a message handed to a handler call, and
// the pipeline that runs it.
type fenceSource interface {
	jobOf(m *kafka.Message) *job
	pipeline() *pipeline
}

func (j *job) pipeline() *pipeline { return j.p }

func (b *batchFences) pipeline() *pipeline {
	if len(b.jobs) == 0 {
		return nil
	}
	return b.jobs[0].p
}

// sameRecord reports whether m is the record j was dispatched for, or a
// copy of it.
func (j *job) sameRecord(m *kafka.Message) bool {
	return m == j.m || (*m.TopicPartition.Topic == j.key.topic && m.TopicPartition.Partition == j.key.partition && int64(m.TopicPartition.Offset) == j.o)
}

// jobOf is a single record's: its own message.
func (j *job) jobOf(m *kafka.Message) *job {
	if j.p == nil || !j.sameRecord(m) {
		return nil
	}
	return j
}

// batchFences answers FenceOf for the records of one BatchHandler call.
type batchFences struct {
	jobs  []*job
	once  sync.Once
	byMsg map[*kafka.Message]*job
}

func (b *batchFences) jobOf(m *kafka.Message) *job {
	b.once.Do(func() {
		b.byMsg = make(map[*kafka.Message]*job, len(b.jobs))
		for _, j := range b.jobs {
			b.byMsg[j.m] = j
		}
	})
	if j := b.byMsg[m]; j != nil {
		return j.jobOf(m)
	}
	for _, j := range b.jobs { // a copy of a batch's message
		if j.sameRecord(m) {
			return j.jobOf(m)
		}
	}
	return nil
}

// withFences returns ctx answering FenceOf for jobs.
func withFences(ctx context.Context, jobs []*job) context.Context {
	return context.WithValue(ctx, fenceKey{}, fenceSource(&batchFences{jobs: jobs}))
}

// fenceOf is j's fence now: the range of the table that holds j's hash,
// while j is the member's record in flight; else the range j was
// dispatched under, as last read.
func (p *pipeline) fenceOf(j *job) Fence {
	p.mu.Lock()
	defer p.mu.Unlock()
	rs := j.w.rs
	if p.mu.isInFlight(j) {
		if w := currentRange(p.mu.byTP, j); w != nil {
			rs = w.rs
		}
	}
	return fenceFrom(rs)
}

func fenceFrom(rs schema.RangeState) Fence {
	return Fence{Topic: rs.Record.Topic, Partition: rs.Record.Partition, Lo: rs.Record.Lo, Hi: rs.Record.Hi, Token: rs.Rev}
}
