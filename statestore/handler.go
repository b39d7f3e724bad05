package statestore

import (
	"context"
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/keystate"
)

// Handler returns h with its record's key state, which h finds with
// KeyOf. A record whose key has applied it already (its offset at or
// below the key's applied offset) is done without calling h. When h
// returns nil having changed the state, the change is appended to the
// changelog, and the record is done once the append is acknowledged. The
// first record of a range the member holds under a new fencing token
// waits until the range's state is restored.
func (s *Store) Handler(h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		return s.handle(ctx, m, h)
	}
}

func (s *Store) handle(ctx context.Context, m *kafka.Message, h consumer.Handler) error {
	f, ok := consumer.FenceOf(ctx, m)
	if !ok {
		return errNoRecordContext
	}
	if m.Key == nil {
		// No key, no state: the handler runs, and a change fails the
		// record with ErrNullKey.
		k := &Key{msg: m, state: &keyState{}}
		if err := h(context.WithValue(ctx, keyContext{}, k), m); err != nil || !k.changed {
			return err
		}
		return keystate.ErrNullKey
	}
	g, err := s.grantOf(ctx, f)
	if err != nil {
		return err
	}
	defer g.calls.Done()
	g.mu.Lock()
	k, skip, err := s.keyFor(g, m, nil)
	g.mu.Unlock()
	if err != nil {
		s.giveUp(g) // its table cannot be read: its disk failed
		return err
	}
	if skip {
		return nil
	}
	if err := h(context.WithValue(ctx, keyContext{}, k), m); err != nil || !k.changed {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // the range is no longer this member's to change
	}
	a, err := s.change(g, k)
	if err != nil {
		return err
	}
	return s.acknowledged(ctx, g, a)
}

// errNoRecordContext is the error of a wrapped handler called by anything
// but a keyshare consumer.
var errNoRecordContext = errors.New("statestore: the handler was called without a keyshare record's context: use the Store's Handler as consumer.Config.Handler (its BatchHandler as Config.BatchHandler)")

// keyFor returns m's Key under g, or reports that m is to be skipped: its
// key has applied it already. state, if not nil, is the key's state as the
// batch's earlier records of the key left it. The caller holds g.mu, and
// gives g up on an error: its table cannot be read.
func (s *Store) keyFor(g *grant, m *kafka.Message, state *keyState) (k *Key, skip bool, err error) {
	seen, err := g.table.Seen(m.Key, int64(m.TopicPartition.Offset))
	if err == nil && state == nil {
		var v []byte
		var present bool
		v, present, err = g.table.Get(m.Key)
		state = &keyState{value: v, present: present}
	}
	switch {
	case err != nil:
		return nil, false, fmt.Errorf("statestore: read the state of key %q: %w", m.Key, err)
	case seen && skipApplied:
		s.skipped.Add(1)
		return nil, true, nil
	}
	return &Key{msg: m, state: state}, false, nil
}

// change puts k's change in g's table and sends it to the changelog. The
// table takes the change before it is appended, so that one it refuses is
// never written; the key's next record sees it only once this record is
// done, after the append is answered.
func (s *Store) change(g *grant, k *Key) (*pendingAppend, error) {
	if k.msg.Key == nil {
		return nil, keystate.ErrNullKey
	}
	e := keystate.Entry{Key: k.msg.Key, Value: k.value, Deleted: !k.present, Applied: int64(k.msg.TopicPartition.Offset), Fence: g.token}
	g.mu.Lock()
	if !skipApplied {
		// The switch-off: a record the key applied runs again, its
		// change recorded just above the key's offset, which the table
		// requires of a change.
		if a, ok, _ := g.table.Applied(e.Key); ok && a >= e.Applied {
			e.Applied = a + 1
		}
	}
	var err error
	if e.Deleted {
		_, err = g.table.Delete(e.Key, e.Applied, e.Fence)
	} else {
		_, err = g.table.Put(e.Key, e.Value, e.Applied, e.Fence)
	}
	g.mu.Unlock()
	if refused := (*keystate.ChangeError)(nil); errors.As(err, &refused) {
		// Seen passed, so the table refuses it for a later owner's
		// token on the key: the member has lost the range.
		return nil, fmt.Errorf("%w: %w", consumer.ErrFenced, err)
	} else if bound := (*keystate.MemoryError)(nil); errors.As(err, &bound) {
		return nil, err // the table is unchanged, and right
	} else if err != nil {
		s.giveUp(g) // its slots failed (a disk's): no more of it
		return nil, err
	}
	a, err := sendEntry(s.producer, s.changelog[g.topic], g.partition, e, &g.appends)
	if err != nil {
		s.giveUp(g)
		return nil, err
	}
	return a, nil
}

// acknowledged waits for append a of a change under g. One that fails
// gives g up: its table holds a change the changelog may not have, and
// the range's next record restores its state again, once this append is
// answered.
func (s *Store) acknowledged(ctx context.Context, g *grant, a *pendingAppend) error {
	if err := a.wait(ctx); err != nil {
		s.giveUp(g)
		return err
	}
	s.changes.Add(1)
	return nil
}
