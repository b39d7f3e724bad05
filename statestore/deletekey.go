package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/keystate"
)

// An operator's deletion of one key's state (keyshare key delete-state),
// with the group paused or stopped.
//
// The tombstone carries the key's applied offset and token, so it wins
// over the state it deletes under the restore rule (on equal offsets and
// tokens a tombstone wins) without a token of its own: the owner of a
// paused group keeps its grant, and a token above it would make the owner
// refuse the key's next change. The owner's follower takes the tombstone
// and appends it again under the owner's token (keystate.Table.Observe);
// that copy, read back, is the owner saying it holds the deletion, so the
// key's next record, once the group resumes, starts from no state.

// ErrNotConfirmed is DeleteKey's wait ending before the owner's copy of
// the tombstone was read: the tombstone is appended, and a restore reads
// it, but the owner may not hold the deletion yet.
var ErrNotConfirmed = errors.New("statestore: the deletion is not confirmed")

// Deletion is what DeleteKey did.
type Deletion struct {
	// State is the key's state as DeleteKey read it: the state deleted,
	// or (Again) the operator's tombstone that deleted it before.
	State KeyState
	// Tombstone is the offset of the tombstone appended; -1 when Again.
	Tombstone int64
	// Again: the key was deleted already, by an operator's tombstone at
	// its applied offset; none was appended, and DeleteKey only looked
	// for the owner's copy.
	Again bool
	// Confirmed: the owner's copy of the tombstone was read, at CopyAt
	// (-1 when it was in the changelog before DeleteKey read it) under
	// CopyToken, the owner's token.
	Confirmed bool
	CopyAt    int64
	CopyToken int64
}

// LostDeletionError is a deletion that did not hold: a change of the key
// that wins over the tombstone under the restore rule was read after the
// state it deletes.
type LostDeletionError struct {
	Key       []byte
	Changelog string
	Partition int32
	Tombstone int64          // its offset; -1 for an earlier one (Deletion.Again)
	Deleted   keystate.Entry // the tombstone
	At        int64          // the offset of the change that wins
	Change    keystate.Entry // the change, its value left out
}

func (e *LostDeletionError) Error() string {
	tomb := ""
	if e.Tombstone >= 0 {
		tomb = " at offset " + strconv.FormatInt(e.Tombstone, 10)
	}
	what := "a change"
	if e.Change.Deleted {
		what = "a deletion"
	}
	return fmt.Sprintf("statestore: the deletion of key %s in %s/%d did not hold: %s of the key at offset %d (applied offset %d, token %d) wins over the tombstone%s (applied offset %d, token %d); "+
		"a record of the key was in flight when the group paused, or its owner repaired a late change: check that the group is paused and run it again",
		strconv.Quote(string(e.Key)), e.Changelog, e.Partition, what, e.At, e.Change.Applied, e.Change.Fence, tomb, e.Deleted.Applied, e.Deleted.Fence)
}

// DeleteKey deletes key's state in partition of changelog, with the Kafka
// connection settings kafkaCfg: it reads the key's state (ReadKey) and
// appends a tombstone at its applied offset and token. A key without
// state, or deleted, is an error.
//
// With wait above 0 it then reads the partition on, for at most wait,
// until the owner's copy of the tombstone (Deletion.Confirmed), or a
// change of the key that wins over it (a *LostDeletionError); the wait
// ending first is ErrNotConfirmed. A key deleted already by an operator's
// tombstone is then no error: DeleteKey looks for the owner's copy of
// that one (Deletion.Again).
//
// It is for an operator, with the group paused or stopped: a record of
// the key that runs after the read makes a change the tombstone loses to.
// With the group stopped no owner is there to copy it; the next owner's
// restore reads the deletion, so wait 0 is what fits.
func DeleteKey(ctx context.Context, kafkaCfg kafka.ConfigMap, changelog string, partition int32, key []byte, wait time.Duration) (Deletion, error) {
	var h deletionHistory
	st, err := readKey(ctx, kafkaCfg, changelog, partition, key, h.add)
	if err != nil {
		return Deletion{}, err
	}
	d := Deletion{State: st, Tombstone: -1, CopyAt: -1}
	tomb := keystate.Entry{Key: key, Deleted: true, Applied: st.Applied, Fence: st.Fence}
	switch {
	case !st.Found:
		return d, fmt.Errorf("statestore: key %s has no state in %s/%d: nothing to delete", strconv.Quote(string(key)), changelog, partition)
	case st.Deleted && (wait <= 0 || !h.deleted):
		return d, fmt.Errorf("statestore: key %s has no state in %s/%d: it was deleted at applied offset %d, token %d; nothing to delete", strconv.Quote(string(key)), changelog, partition, st.Applied, st.Fence)
	case st.Deleted && h.copied:
		d.Again, d.Confirmed, d.CopyToken = true, true, h.copyToken
		return d, nil
	case st.Deleted:
		d.Again = true
		return d, awaitCopy(ctx, kafkaCfg, &d, tomb, wait)
	}
	p, err := newAppender(kafkaCfg, hclog.NewNullLogger())
	if err != nil {
		return d, err
	}
	defer p.Close()
	var inFlight sync.WaitGroup
	a, err := sendEntry(p, changelog, partition, tomb, &inFlight)
	if err != nil {
		return d, err
	}
	if d.Tombstone, err = a.waitOffset(ctx); err != nil {
		return d, err
	}
	if wait <= 0 {
		return d, nil
	}
	return d, awaitCopy(ctx, kafkaCfg, &d, tomb, wait)
}

// awaitCopy reads d's partition from where DeleteKey's read of the key's
// state ended, for at most wait, until the owner's copy of tomb, or a
// change of the key that wins over tomb. Reading from there rather than
// from the tombstone also finds a change that landed between the read and
// the append.
func awaitCopy(ctx context.Context, kafkaCfg kafka.ConfigMap, d *Deletion, tomb keystate.Entry, wait time.Duration) error {
	topic, partition := d.State.Changelog, d.State.Partition
	c, err := toolStore(kafkaCfg).newReader()
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(d.State.ReadTo)}}); err != nil {
		return fmt.Errorf("statestore: read changelog %s/%d: %w", topic, partition, err)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	next := d.State.ReadTo
	for wctx.Err() == nil {
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error != nil {
				return fmt.Errorf("statestore: read changelog %s/%d: %w", topic, partition, ev.TopicPartition.Error)
			}
			at := int64(ev.TopicPartition.Offset)
			next = at + 1
			if at == d.Tombstone || !bytes.Equal(ev.Key, tomb.Key) {
				continue
			}
			e, err := DecodeMessage(ev)
			if err != nil {
				return fmt.Errorf("statestore: changelog %s/%d offset %d: %w", topic, partition, at, err)
			}
			switch {
			case copies(e, tomb, at > d.Tombstone):
				d.Confirmed, d.CopyAt, d.CopyToken = true, at, e.Fence
				return nil
			case !survives(tomb, e):
				e.Value = nil
				return &LostDeletionError{Key: tomb.Key, Changelog: topic, Partition: partition, Tombstone: d.Tombstone, Deleted: tomb, At: at, Change: e}
			}
		case kafka.Error:
			if ev.IsFatal() {
				return fmt.Errorf("statestore: read changelog %s/%d: %w", topic, partition, ev)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w: no copy of the tombstone of key %s (applied offset %d) in %s/%d within %s, read up to offset %d",
		ErrNotConfirmed, strconv.Quote(string(tomb.Key)), tomb.Applied, topic, partition, wait, next)
}

// copies reports whether e is an owner's copy of tombstone tomb: a
// tombstone at its applied offset under a token not below its own,
// written after it (an equal one before it is another deleter's), or
// under a larger token.
func copies(e, tomb keystate.Entry, after bool) bool {
	return e.Deleted && e.Applied == tomb.Applied && (e.Fence > tomb.Fence || e.Fence == tomb.Fence && after)
}

// survives reports whether tomb is still its key's state, by the restore
// rule, with e read after it.
func survives(tomb, e keystate.Entry) bool {
	rs, err := keystate.NewRestore(hashOf(tomb.Key), keystate.DefaultConfig())
	if err != nil || rs.Add(tomb) != nil || rs.Add(e) != nil {
		return false // a change too big to keep wins, as far as the deleter can tell
	}
	table, _, err := rs.Table(0)
	if err != nil {
		return false
	}
	w, _, err := table.Entry(tomb.Key)
	return err == nil && w.Deleted && w.Applied == tomb.Applied && w.Fence == tomb.Fence
}

// deletionHistory follows one key's entries at its highest applied offset,
// in changelog order, to tell an operator's tombstone (one under the token
// of a value at the same offset, read after it: the record made the
// value, the operator the tombstone; a handler's deletion is a change of
// its own offset) and a copy of it after, an owner's.
type deletionHistory struct {
	applied   int64
	tokens    []int64 // of the values at applied
	deleted   bool    // an operator's tombstone at applied was read
	copied    bool    // and a tombstone at applied after it
	copyToken int64
}

func (h *deletionHistory) add(e keystate.Entry) {
	if e.Applied > h.applied {
		*h = deletionHistory{applied: e.Applied}
	}
	switch {
	case e.Applied < h.applied:
	case !e.Deleted:
		h.tokens = append(h.tokens, e.Fence)
	case h.deleted:
		h.copied, h.copyToken = true, max(h.copyToken, e.Fence)
	case slices.Contains(h.tokens, e.Fence):
		h.deleted = true
	}
}
