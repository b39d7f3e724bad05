package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// ReplayRequest asks for one key's records to run again from an offset.
type ReplayRequest struct {
	KeyQuery
	// From is the first offset to run again: at or above the partition's
	// log start, and at or below the key's handled position.
	From   int64
	Reason string
	By     string // who asks (keyshare key: user@host)
}

// ReplayKey has the key's owner run the key's records in [From, the key's
// next live record) again, in order, before that live record; the ledger
// and the committed offset are not touched. It records its progress in
// the operation, so a range moved meanwhile resumes at the new owner. It
// refuses, with an error wrapping ErrBadKeyQuery and changing nothing, an
// unknown topic or partition, a key that already has an operation, From
// below the log start (named) or above the key's handled position: its
// last handled offset, or with that unknown, the offset below the range's
// watermark.
func (g *Group) ReplayKey(ctx context.Context, r ReplayRequest) (KeyOp, error) {
	if err := checkOpText(r.Reason, r.By); err != nil {
		return KeyOp{}, err
	}
	if len(r.Key) > schema.MaxKeyOpKeyBytes {
		return KeyOp{}, fmt.Errorf("%w: a key of %d bytes: operations take keys of at most %d", ErrBadKeyQuery, len(r.Key), schema.MaxKeyOpKeyBytes)
	}
	if r.From < 0 {
		return KeyOp{}, fmt.Errorf("%w: --from %d: want an offset, 0 or more", ErrBadKeyQuery, r.From)
	}
	info, err := g.DescribeKey(ctx, r.KeyQuery)
	if err != nil {
		return KeyOp{}, err
	}
	where := fmt.Sprintf("key %s of %s/%d", textsafe.Quote(string(r.Key)), textsafe.Quote(info.Topic), info.Partition)
	if info.Op != nil {
		return KeyOp{}, fmt.Errorf("%w: %s already has an operation (%s): cancel it first (keyshare key cancel)", ErrBadKeyQuery, where, info.Op.Op)
	}
	low, _, err := g.kc.QueryWatermarkOffsets(info.Topic, info.Partition, kafkaTimeoutMs)
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: read the bounds of %s/%d: %w", info.Topic, info.Partition, err)
	}
	if r.From < low {
		return KeyOp{}, fmt.Errorf("%w: offset %d is below the log start of %s/%d, %d: the records before it are deleted", ErrBadKeyQuery, r.From, info.Topic, info.Partition, low)
	}
	handled, how := info.LastHandled, "its last handled offset"
	if handled < 0 && info.Range != nil && info.Range.Watermark > 0 {
		handled, how = info.Range.Watermark-1, "the offset below its range's watermark (which of its records are handled above it is not known)"
	}
	if handled < 0 {
		return KeyOp{}, fmt.Errorf("%w: %s has no record known handled: nothing to replay from %d", ErrBadKeyQuery, where, r.From)
	}
	if r.From > handled {
		return KeyOp{}, fmt.Errorf("%w: offset %d is above the handled position of %s: %d, %s", ErrBadKeyQuery, r.From, where, handled, how)
	}
	rec := schema.KeyOpRecord{Op: schema.KeyOpReplay, Topic: info.Topic, Partition: info.Partition, Key: r.Key, Offset: r.From, Next: r.From,
		By: r.By, Reason: r.Reason}
	op, err := coord.PutKeyOp(ctx, g.cli, g.group, rec, 0)
	if errors.Is(err, coord.ErrKeyOpChanged) {
		return KeyOp{}, fmt.Errorf("%w: %s was given an operation while the replay was being set: look again (keyshare key describe)", ErrBadKeyQuery, where)
	}
	if err != nil {
		return KeyOp{}, fmt.Errorf("admin: %w", err)
	}
	return keyOpOf(op), nil
}
