package statestore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer"
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

	mu        sync.Mutex
	held      grants
	retired   []*grant              // given up, with calls or appends not done (retireLocked)
	following map[partitionKey]bool // partitions with a follower (follow.go)
	retiring  sync.WaitGroup        // retireLocked's waits
	closing   bool                  // Close began: no more retireLocked waits

	// disk holds the ranges' states with Config.Dir, and copies the
	// ranges given up that it still holds (copies.go); copiesBroken: a
	// copy's record could not be written, so none is trusted.
	disk         *diskStore
	copies       []*copyRange
	copiesBroken bool

	restores atomic.Int64 // ranges restored
	fromCopy atomic.Int64 // of them, from the member's own copy and the changelog's tail
	repairs  atomic.Int64 // late changes repaired (follow.go)
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
	p, err := newAppender(cfg.Kafka, cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger, changelog: make(map[string]string), producer: p, held: make(grants), following: make(map[partitionKey]bool)}
	for _, t := range cfg.Topics {
		s.changelog[t] = cfg.Changelog(cfg.Group, t)
	}
	if err := s.ensureChangelogs(ctx); err != nil {
		p.Close()
		return nil, err
	}
	if cfg.Dir != "" {
		if s.disk, err = openDisk(cfg.Dir, cfg.Group, cfg.DiskCacheBytes, cfg.Logger.Named("disk")); err == nil {
			err = s.loadCopies()
		}
		if err != nil {
			if s.disk != nil {
				s.disk.close()
			}
			p.Close()
			return nil, err
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Close stops the restores under way and closes the producer, after the
// appends on their way are answered (or time out). With the state on disk
// it then records the ranges the member holds as copies, for its next
// start, and closes the disk store.
func (s *Store) Close() {
	s.cancel()
	s.wg.Wait()
	s.producer.Flush(int(deliveryTimeout / time.Millisecond))
	s.mu.Lock()
	s.closing = true // a Track pass or a late giveUp adds no wait now
	s.mu.Unlock()
	s.retiring.Wait()
	if s.disk != nil {
		s.saveHeldCopies()
		s.mu.Lock()
		d := s.disk
		s.disk = nil // a late giveUp keeps no copy
		s.mu.Unlock()
		if err := d.close(); err != nil {
			s.log.Error("close the state store on disk", "error", err)
		}
	}
	s.producer.Close()
}

// Changelog returns the changelog topic of input topic, or "" for a topic
// the Store was not configured with.
func (s *Store) Changelog(topic string) string { return s.changelog[topic] }

// grantOf returns the restored grant that record fence f belongs to,
// starting its restore if the member does not hold it yet, and waiting
// for the restore. The call counts among the grant's calls until the
// caller calls g.calls.Done (grants.go says why).
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
		for _, o := range s.held.replace(g) {
			s.retireLocked(o)
		}
		g.parts = s.takeCopiesLocked(g)
		waitFor := s.retiredOverlapping(g)
		s.wg.Add(1)
		g.calls.Add(1) // the restore's
		go func() {
			defer s.wg.Done()
			defer g.calls.Done()
			s.restore(s.ctx, g, waitFor)
		}()
	}
	g.calls.Add(1) // under s.mu: a grant replacing g waits for this call
	s.mu.Unlock()
	select {
	case <-g.ready:
	case <-ctx.Done():
		g.calls.Done()
		return nil, ctx.Err()
	}
	if g.err != nil {
		g.calls.Done()
		return nil, g.err
	}
	return g, nil
}

// switchOff turns off one of the rules this package keeps, to prove that
// a test of the whole system bites: set only at build time, by a fault
// matrix row that builds its own member binary with
// -ldflags "-X github.com/keyshare/keyshare/statestore.switchOff=skip".
// A binary built without it (every release) keeps every rule.
var switchOff string

// skipApplied is the skip rule at work. Off (a test, or switchOff "skip"),
// a record its key has applied runs again, and its change is recorded
// just above the key's applied offset, which the table requires of a
// change: the counts of an aggregation go over after a crash re-run.
var skipApplied = switchOff != "skip"

// giveUp drops g from the member's grants: its table may hold a change
// the changelog lacks, so it is no copy either. A restore of its range
// waits for its calls and appends.
func (s *Store) giveUp(g *grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.spoiled = true
	if g.given {
		return
	}
	s.held.remove(g)
	s.retireLocked(g)
}

// retireLocked gives g up and keeps it among the retired grants until its
// calls and appends are done: a restore of a range overlapping it waits
// for it then (grants.go). The caller holds s.mu and has taken g out of
// s.held.
func (s *Store) retireLocked(g *grant) {
	g.given = true
	if s.closing {
		return
	}
	s.retired = append(s.retired, g)
	s.keepCopyLocked(g)
	s.retiring.Add(1)
	go func() {
		defer s.retiring.Done()
		g.calls.Wait()
		g.appends.Wait()
		s.settleCopies(g)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.retired = slices.DeleteFunc(s.retired, func(o *grant) bool { return o == g })
	}()
}

// retiredOverlapping returns the retired grants of g's partition whose
// range overlaps g's. The caller holds s.mu.
func (s *Store) retiredOverlapping(g *grant) []*grant {
	var out []*grant
	for _, o := range s.retired {
		if o.topic == g.topic && o.partition == g.partition && !o.rng.Intersect(g.rng).Empty() {
			out = append(out, o)
		}
	}
	return out
}

// Stats counts what the Store did since New.
type Stats struct {
	Restores int64 // ranges restored from the changelog
	FromCopy int64 // of them, from the member's own copy on disk and the changelog's tail
	Skipped  int64 // records done without their handler: their key had applied them
	Changes  int64 // changes appended and acknowledged
	Repairs  int64 // keys' states appended again over a late change of a member that lost the range
}

// Stats returns the Store's counts.
func (s *Store) Stats() Stats {
	return Stats{Restores: s.restores.Load(), FromCopy: s.fromCopy.Load(), Skipped: s.skipped.Load(), Changes: s.changes.Load(), Repairs: s.repairs.Load()}
}
