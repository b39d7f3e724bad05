package pgsink

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/keyshare/keyshare/consumer"
)

// The fence check. For each topic and partition the fences table holds the
// newest token written through the sink for each hash range. A write under
// fence (lo, hi, token) is refused if any range overlapping [lo, hi) has a
// newer token: some of the write's hashes have a later owner (the token
// argument is consumer.Fence's). Otherwise the write is let through, and
// its own range's row is made to say token.
//
// The check and the write's effect must be one atomic step against a later
// owner's first write, or a stale owner could check, then the new owner
// write and commit, then the stale owner commit after it. Row locks
// (SELECT ... FOR UPDATE) cannot give that: a later owner's range is
// often a row that does not exist yet (a range cut by a split), and two
// transactions each locking the rows they find would both pass. So every
// write takes an advisory lock on its (topic, partition), held to commit:
// shared when its range's row already says its token (the usual case: the
// writes of an unchanged assignment run concurrently), exclusive when it
// must write a newer token. An exclusive writer waits for every shared
// holder of the partition to commit, and once it commits, a stale writer's
// shared check sees its token. A shared attempt that finds its row not
// yet at its token rolls back and runs again exclusive.
//
// The lock is a statement of its own, before the check: under read
// committed a statement reads a snapshot taken when it starts, so a check
// in the statement that waited for the lock could miss the commit it
// waited for.

// errAdvance sends Apply from the shared attempt to the exclusive one.
var errAdvance = errors.New("pgsink: the range's token must be written")

// fenceCheck holds what the fence statements read.
type fenceCheck struct {
	newest int64 // newest token of a range overlapping the write's
	mine   bool  // the write's own range is at its token already
}

// queueLock queues the lock of f's partition: shared, or exclusive to
// write a newer token.
func queueLock(b *pgx.Batch, topic string, partition int32, exclusive bool) {
	if exclusive {
		b.Queue("SELECT pg_advisory_xact_lock(hashtext($1), $2)", topic, partition)
		return
	}
	b.Queue("SELECT pg_advisory_xact_lock_shared(hashtext($1), $2)", topic, partition)
}

// queueCheck queues the fence statement of f, after its partition's lock;
// with advance (the lock exclusive) it also writes f's token for f's
// range if the write may pass.
func (s *Sink) queueCheck(b *pgx.Batch, f consumer.Fence, advance bool, fc *fenceCheck) {
	if !advance {
		b.Queue(`SELECT coalesce(max(token), 0), coalesce(bool_or(lo = $3 AND hi = $4 AND token = $5), false)
FROM `+s.fences+` WHERE topic = $1 AND kafka_partition = $2 AND lo < $4 AND hi > $3`,
			f.Topic, f.Partition, int64(f.Lo), int64(f.Hi), f.Token).QueryRow(func(r pgx.Row) error {
			return r.Scan(&fc.newest, &fc.mine)
		})
		return
	}
	// Make f's range's row say its token, and drop the rows its range
	// covers that are no newer (any later write overlapping them overlaps
	// this row, whose token is at least theirs), so the table keeps about
	// one row per range.
	b.Queue(`WITH newest AS (
	SELECT coalesce(max(token), 0) AS token FROM `+s.fences+`
	WHERE topic = $1 AND kafka_partition = $2 AND lo < $4 AND hi > $3
), covered AS (
	DELETE FROM `+s.fences+`
	WHERE topic = $1 AND kafka_partition = $2 AND lo >= $3 AND hi <= $4 AND NOT (lo = $3 AND hi = $4)
	AND token <= $5 AND (SELECT token FROM newest) <= $5
), advanced AS (
	INSERT INTO `+s.fences+` (topic, kafka_partition, lo, hi, token)
	SELECT $1, $2, $3, $4, $5 WHERE (SELECT token FROM newest) <= $5
	ON CONFLICT (topic, kafka_partition, lo, hi) DO UPDATE SET token = greatest(`+s.fences+`.token, excluded.token)
)
SELECT token FROM newest`,
		f.Topic, f.Partition, int64(f.Lo), int64(f.Hi), f.Token).QueryRow(func(r pgx.Row) error {
		fc.mine = true
		return r.Scan(&fc.newest)
	})
}

// verdict is what the fence statement found: nil (pass), a *FencedError,
// or errAdvance.
func (fc *fenceCheck) verdict(f consumer.Fence, advance bool) error {
	switch {
	case fc.newest > f.Token:
		return &FencedError{Fence: f, Newest: fc.newest}
	case !fc.mine && !advance:
		return errAdvance
	}
	return nil
}

// FencedError is a write refused for a stale fence: a range overlapping
// the write's has a newer token in the sink, so a later owner holds some
// of its hashes. It matches consumer.ErrFenced (errors.Is).
type FencedError struct {
	Fence  consumer.Fence // the refused write's
	Newest int64          // the newest token of an overlapping range
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("pgsink: write refused: range [%d, %d) of %s/%d under token %d, but token %d was written for an overlapping range (a later owner holds it)",
		e.Fence.Lo, e.Fence.Hi, e.Fence.Topic, e.Fence.Partition, e.Fence.Token, e.Newest)
}

// Unwrap makes the error match consumer.ErrFenced.
func (e *FencedError) Unwrap() error { return consumer.ErrFenced }
