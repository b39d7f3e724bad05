package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// Operations on one key for the whole group, kept in etcd
// (keyops/<topic>/<partition>/<hash>/<key>) and honoured by whichever
// member owns the key's hash, now or after its range moves.

// KeyOp is an operation an operator set on one key.
type KeyOp struct {
	Op        string // "skip", "park", "unpark", "replay"
	Topic     string
	Partition int32
	Key       []byte
	Offset    int64 // the record a skip is for
	Drop      bool  // a skip drops the record instead of dead-lettering it
	// ParkTopic is where a park copies the key's records; ParkFrom, the
	// end of its partition when the park was set.
	ParkTopic string
	ParkFrom  int64
	// Next is an unpark's or a replay's progress; ReplayTo, where a
	// replay stops (0 until its owner begins it).
	Next, ReplayTo int64
	By             string
	Reason         string
	At             time.Time
	// Refused is why the key's owner does not apply it (written by the
	// member), "" while it has not refused.
	Refused string
	// Problem says the stored value is damaged (the rest is then empty
	// but for the key's place): members do not apply it.
	Problem string
}

// SkipRequest asks for the head record of one key to be skipped.
type SkipRequest struct {
	KeyQuery
	// Offset must be the key's head: the record its stuck report names,
	// or else its lowest pending offset (DescribeKey).
	Offset int64
	// Drop: the owner drops the record instead of writing it to the
	// dead-letter topic; a member with no dead-letter topic refuses a
	// skip without it.
	Drop   bool
	Reason string
	// By says who asks (keyshare key: user@host).
	By string
}

// SkipKey sets a skip of the key's head record: at the record's next
// attempt, its owner writes it to the dead-letter topic with a cause
// naming the operator (or drops it, with Drop), counts it done, and the
// key's later records run; the skip is then deleted. It refuses, with an
// error wrapping ErrBadKeyQuery and changing nothing, an unknown topic or
// partition, a key longer than state.MaxKeyOpKeyBytes, a key no range
// holds yet or with no pending record, and an offset that is not the
// key's head. A skip already set on the key is replaced (to add Drop to a
// refused one); another operation is not.
func (g *Group) SkipKey(ctx context.Context, r SkipRequest) (KeyOp, error) {
	if err := checkOpText(r.Reason, r.By); err != nil {
		return KeyOp{}, err
	}
	if r.Offset < 0 {
		return KeyOp{}, fmt.Errorf("%w: offset %d: want the key's head offset, 0 or more", ErrBadKeyQuery, r.Offset)
	}
	if len(r.Key) > schema.MaxKeyOpKeyBytes {
		return KeyOp{}, fmt.Errorf("%w: a key of %d bytes: operations take keys of at most %d", ErrBadKeyQuery, len(r.Key), schema.MaxKeyOpKeyBytes)
	}
	info, err := g.DescribeKey(ctx, r.KeyQuery)
	if err != nil {
		return KeyOp{}, err
	}
	where := fmt.Sprintf("key %s of %s/%d", textsafe.Quote(string(r.Key)), textsafe.Quote(info.Topic), info.Partition)
	if info.Range == nil {
		return KeyOp{}, fmt.Errorf("%w: %s: no range holds its hash yet (the leader has not assigned the partition); nothing to skip", ErrBadKeyQuery, where)
	}
	head, from := int64(-1), ""
	switch {
	case info.Stuck != nil:
		head, from = info.Stuck.Offset, "the record its stuck report names"
	case len(info.Pending) > 0:
		head, from = info.Pending[0], "its lowest pending offset"
	default:
		return KeyOp{}, fmt.Errorf("%w: %s has no pending record: nothing to skip (offset %d)", ErrBadKeyQuery, where, r.Offset)
	}
	if r.Offset != head {
		return KeyOp{}, fmt.Errorf("%w: offset %d is not the head of %s: its head is %d, %s (keyshare key describe)", ErrBadKeyQuery, r.Offset, where, head, from)
	}
	old, exists, err := coord.ReadKeyOp(ctx, g.cli, g.group, info.Topic, info.Partition, r.Key)
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	rev := int64(0)
	if exists {
		if old.Err == nil && old.Record.Op != schema.KeyOpSkip {
			return KeyOp{}, fmt.Errorf("%w: %s already has a %s operation: cancel it first (keyshare key cancel)", ErrBadKeyQuery, where, old.Record.Op)
		}
		rev = old.Rev
	}
	rec := schema.KeyOpRecord{Op: schema.KeyOpSkip, Topic: info.Topic, Partition: info.Partition, Key: r.Key, Offset: r.Offset,
		Drop: r.Drop, By: r.By, Reason: r.Reason}
	op, err := coord.PutKeyOp(ctx, g.cli, g.group, rec, rev)
	if errors.Is(err, coord.ErrKeyOpChanged) {
		return KeyOp{}, fmt.Errorf("admin: the operation on %s changed while the skip was being set: look again (keyshare key describe) and retry", where)
	}
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	return keyOpOf(op), nil
}

// checkOpText refuses a reason or requester an operation does not store,
// before the operation changes anything (a park creates its topic).
func checkOpText(reason, by string) error {
	if len(reason) > schema.MaxKeyOpTextBytes {
		return fmt.Errorf("%w: a reason of %d bytes: at most %d", ErrBadKeyQuery, len(reason), schema.MaxKeyOpTextBytes)
	}
	if len(by) > schema.MaxKeyOpTextBytes {
		return fmt.Errorf("%w: a requester (by) of %d bytes: at most %d", ErrBadKeyQuery, len(by), schema.MaxKeyOpTextBytes)
	}
	return nil
}

// CancelKeyOp deletes the operation set on one key and returns it. A key
// with none is refused with an error wrapping ErrBadKeyQuery.
func (g *Group) CancelKeyOp(ctx context.Context, q KeyQuery) (KeyOp, error) {
	info, err := g.DescribeKey(ctx, q)
	if err != nil {
		return KeyOp{}, err
	}
	if info.Op == nil {
		return KeyOp{}, fmt.Errorf("%w: key %s of %s/%d has no operation to cancel", ErrBadKeyQuery, textsafe.Quote(string(q.Key)), textsafe.Quote(info.Topic), info.Partition)
	}
	old, exists, err := coord.ReadKeyOp(ctx, g.cli, g.group, info.Topic, info.Partition, q.Key)
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	if exists {
		if _, err := coord.DeleteKeyOp(ctx, g.cli, old); err != nil {
			return KeyOp{}, fmt.Errorf("admin: %w", err)
		}
	}
	return *info.Op, nil
}

// KeyOps lists the operations set on the group's keys, in key order
// (keyshare status).
func (g *Group) KeyOps(ctx context.Context) ([]KeyOp, error) {
	ops, _, err := coord.ReadKeyOps(ctx, g.cli, g.group)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	out := make([]KeyOp, len(ops))
	for i, op := range ops {
		out[i] = keyOpOf(op)
	}
	return out, nil
}

func keyOpOf(op coord.KeyOp) KeyOp {
	if op.Err != nil {
		return KeyOp{Problem: op.Err.Error()}
	}
	r := op.Record
	return KeyOp{Op: r.Op, Topic: r.Topic, Partition: r.Partition, Key: r.Key, Offset: r.Offset, Drop: r.Drop,
		ParkTopic: r.ParkTopic, ParkFrom: r.ParkFrom, Next: r.Next, ReplayTo: r.ReplayTo, By: r.By, Reason: r.Reason, At: r.At, Refused: r.Refused}
}
