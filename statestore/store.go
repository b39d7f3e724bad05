package statestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// Store keeps the keyed state of one group's handler on one member. Make
// it with New, wrap the handler with Handler, and Close it after the
// consumer's Run has returned.
type Store struct {
	cfg       Config
	log       hclog.Logger
	changelog map[string]string // input topic → its changelog
	producer  *kafka.Producer

	ctx    context.Context // ends with Close: restores stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	held grants

	restores atomic.Int64 // ranges restored
	skipped  atomic.Int64 // records skipped as applied already
	changes  atomic.Int64 // changes appended
}

// New checks cfg, makes sure each input topic's changelog exists
// (creating it compacted, with the input's partition count), and opens
// the changelog's producer.
func New(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p, err := newAppender(cfg.Kafka)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger, changelog: make(map[string]string), producer: p, held: make(grants)}
	for _, t := range cfg.Topics {
		s.changelog[t] = cfg.Changelog(cfg.Group, t)
	}
	if err := s.ensureChangelogs(ctx); err != nil {
		p.Close()
		return nil, err
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the restores under way and closes the producer, after the
// appends on their way are answered (or time out).
func (s *Store) Close() {
	s.cancel()
	s.wg.Wait()
	s.producer.Flush(int(deliveryTimeout / time.Millisecond))
	s.producer.Close()
}

// Changelog returns the changelog topic of input topic, or "" for a topic
// the Store was not configured with.
func (s *Store) Changelog(topic string) string { return s.changelog[topic] }

// Handler returns h with its record's key state: h finds it with KeyOf.
// A record whose key has applied it already (its offset at or below the
// key's applied offset) is done without calling h. When h returns nil
// having changed the state, the change is appended to the changelog, and
// the record is done once the append is acknowledged. The first record of
// a range the member holds under a new fencing token waits until the
// range's state is restored.
func (s *Store) Handler(h consumer.Handler) consumer.Handler {
	return func(ctx context.Context, m *kafka.Message) error {
		return s.handle(ctx, m, h)
	}
}

func (s *Store) handle(ctx context.Context, m *kafka.Message, h consumer.Handler) error {
	f, ok := consumer.FenceOf(ctx, m)
	if !ok {
		return errors.New("statestore: the handler was called without a keyshare record's context: use the Handler as consumer.Config.Handler")
	}
	if m.Key == nil {
		// No key, no state: the handler runs, and a change fails the
		// record with ErrNullKey.
		k := &Key{}
		if err := h(context.WithValue(ctx, keyContext{}, k), m); err != nil || !k.changed {
			return err
		}
		return keystate.ErrNullKey
	}
	g, err := s.grantOf(ctx, f)
	if err != nil {
		return err
	}
	offset := int64(m.TopicPartition.Offset)
	g.mu.Lock()
	seen := g.table.Seen(m.Key, offset)
	cur, present := g.table.Get(m.Key)
	applied, _ := g.table.Applied(m.Key)
	g.mu.Unlock()
	switch {
	case seen && skipApplied:
		s.skipped.Add(1)
		return nil
	case seen:
		// The switch-off: the record runs again, its change recorded
		// above the key's offset, as if the key had not applied it.
		offset = applied + 1
	}
	k := &Key{key: m.Key, value: cur, present: present}
	if err := h(context.WithValue(ctx, keyContext{}, k), m); err != nil || !k.changed {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // the range is no longer this member's to change
	}
	return s.change(ctx, g, k, offset)
}

// change appends k's change under g, then applies it to g's table.
func (s *Store) change(ctx context.Context, g *grant, k *Key, offset int64) error {
	e := keystate.Entry{Key: k.key, Value: k.value, Deleted: !k.present, Applied: offset, Fence: g.token}
	g.mu.Lock()
	// The table takes the change before it is appended: one it refuses
	// is never written. The key's next record comes only after this one
	// returns, so no one reads the change before its append is answered.
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
		return fmt.Errorf("%w: %w", consumer.ErrFenced, err)
	} else if err != nil {
		return err
	}
	if err := appendEntry(ctx, s.producer, s.changelog[g.topic], g.partition, e, &g.appends); err != nil {
		// Not acknowledged: the table must not keep what the changelog
		// may not have. The grant is given up, and the range's next
		// record restores its state again, once this append is answered.
		s.giveUp(g)
		return err
	}
	s.changes.Add(1)
	return nil
}

// grantOf returns the restored grant that record fence f belongs to,
// starting its restore if the member does not hold it yet, and waiting
// for the restore.
func (s *Store) grantOf(ctx context.Context, f consumer.Fence) (*grant, error) {
	r := ledger.HashRange{Lo: f.Lo, Hi: f.Hi}
	pk := partitionKey{f.Topic, f.Partition}
	if _, ok := s.changelog[f.Topic]; !ok {
		return nil, fmt.Errorf("statestore: a record of topic %q, which the Store was not configured with (Config.Topics)", f.Topic)
	}
	s.mu.Lock()
	g := s.held.find(pk, r, f.Token)
	if g == nil {
		if s.held.superseded(pk, r, f.Token) {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: the member holds range %s of %s/%d under a newer token than %d", consumer.ErrFenced, r, f.Topic, f.Partition, f.Token)
		}
		g = &grant{topic: f.Topic, partition: f.Partition, rng: r, token: f.Token, ready: make(chan struct{})}
		g.progress.started = time.Now()
		g.progress.end.Store(-1)
		replaced := s.held.replace(g)
		for _, o := range replaced {
			o.given = true
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.restore(s.ctx, g, replaced)
		}()
	}
	s.mu.Unlock()
	select {
	case <-g.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if g.err != nil {
		return nil, g.err
	}
	return g, nil
}

// skipApplied is the skip rule at work: a test turns it off to see the
// counts of an aggregation go over after a crash re-run (a record the key
// has applied runs again, and its change is recorded just above the key's
// applied offset, which the table requires of a change).
var skipApplied = true

// giveUp drops g from the member's grants: its table may hold a change
// the changelog lacks. A restore of its range waits for its appends.
func (s *Store) giveUp(g *grant) {
	s.mu.Lock()
	g.given = true
	s.mu.Unlock()
}

// Stats counts what the Store did since New.
type Stats struct {
	Restores int64 // ranges restored from the changelog
	Skipped  int64 // records done without their handler: their key had applied them
	Changes  int64 // changes appended and acknowledged
}

// Stats returns the Store's counts.
func (s *Store) Stats() Stats {
	return Stats{Restores: s.restores.Load(), Skipped: s.skipped.Load(), Changes: s.changes.Load()}
}
