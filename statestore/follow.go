package statestore

import (
	"context"
	"math"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// Following the changelog while the member holds a partition's ranges.
//
// A member that lost a range can still append to it: a handler past its
// drain budget, or a member paused past its lease, whose append was on
// its way. Such a late change lands after the next owner's restore read
// the partition. If it loses under the restore rule, it is still its
// key's last record, the one compaction keeps, and the next restore would
// take it; so the owner reads on in the partition and appends the key's
// state again (keystate.Table.Observe's repair). If it wins (the late
// member was ahead on the key), the owner's table takes it, as a restore
// would. One reader per partition follows every range the member holds
// of it, each from the end offset its restore read.

// follow starts the follower of g's partition, once g is restored, unless
// one runs.
func (s *Store) follow(g *grant) {
	pk := partitionKey{g.topic, g.partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.following[pk] || !followChangelog {
		return
	}
	s.following[pk] = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.followPartition(s.ctx, pk)
	}()
}

// followed returns the restored grants of pk the follower serves, each
// with a call counted, which the caller ends (grants.go); none, and the
// follower stops.
func (s *Store) followed(pk partitionKey) []*grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	var gs []*grant
	for _, g := range s.held[pk] {
		if g.progress.done.Load() && !g.given && g.table != nil {
			g.calls.Add(1)
			gs = append(gs, g)
		}
	}
	if len(gs) == 0 {
		delete(s.following, pk)
	}
	return gs
}

func (s *Store) followPartition(ctx context.Context, pk partitionKey) {
	topic := s.changelog[pk.topic]
	c, err := s.newReader()
	if err != nil {
		s.log.Error("cannot follow the changelog; late changes of members that lost a range go unrepaired", "topic", topic, "partition", pk.partition, "error", err)
		s.mu.Lock()
		delete(s.following, pk)
		s.mu.Unlock()
		return
	}
	defer c.Close()
	f := follower{c: c, topic: topic, partition: pk.partition, next: -1, served: make(map[*grant]bool)}
	for ctx.Err() == nil {
		gs := s.followed(pk)
		if len(gs) == 0 {
			return
		}
		s.followStep(ctx, &f, gs)
		for _, g := range gs {
			g.calls.Done()
		}
	}
}

// follower is one partition's changelog reader and where it stands.
type follower struct {
	c         *kafka.Consumer
	topic     string
	partition int32
	next      int64 // the next offset the reader delivers; -1 before the first
	// endChecked is when checkEnd last asked for the partition's end.
	endChecked time.Time
	served     map[*grant]bool // grants the reader has passed records to from their start
}

// followStep seeks back for a grant restored behind the reader, reads the
// next record, and passes it to the grants gs that hold its key.
func (s *Store) followStep(ctx context.Context, f *follower, gs []*grant) {
	seek := int64(math.MaxInt64)
	for _, g := range gs {
		if !f.served[g] {
			f.served[g] = true
			if f.next < 0 || g.from < f.next {
				seek = min(seek, g.from) // restored since, behind the reader
			}
		}
	}
	if seek != math.MaxInt64 {
		if err := f.c.Assign([]kafka.TopicPartition{{Topic: &f.topic, Partition: f.partition, Offset: kafka.Offset(seek)}}); err != nil {
			s.log.Warn("follow the changelog", "topic", f.topic, "partition", f.partition, "error", err)
			clear(f.served)
			sleep(ctx, time.Second)
			return
		}
		f.next = seek
	}
	var m *kafka.Message
	switch ev := f.c.Poll(200).(type) {
	case kafka.PartitionEOF:
		if int64(ev.Offset) == f.next { // not one from before a seek
			s.checkEnd(f, gs)
		}
		return
	case *kafka.Message:
		if ev.TopicPartition.Error != nil {
			return
		}
		m = ev
	case nil:
		if time.Since(f.endChecked) > endCheckInterval {
			s.checkEnd(f, gs) // a quiet partition: its copies stay young
		}
		return
	default:
		return
	}
	f.next = int64(m.TopicPartition.Offset) + 1
	e, err := DecodeMessage(m)
	if err != nil {
		s.log.Error("changelog record that is no change of state; a restore will refuse it", "topic", f.topic, "partition", f.partition, "offset", m.TopicPartition.Offset, "error", err)
		s.spoilAll(gs) // a copy restored past it would not refuse it
		return
	}
	s.observe(ctx, gs, int64(m.TopicPartition.Offset), e)
}

// endMargin sets a copy's time (throughAt) back from the moment the
// follower asked for the partition's end, for the clocks of the member
// and the broker; endCheckInterval is how often an idle follower asks.
const (
	endMargin        = 5 * time.Second
	endCheckInterval = 5 * time.Second
)

// checkEnd asks the broker for the partition's end offset and, when the
// follower has read up to it, records that it passed gs every entry
// before it. Asked, not taken from a PartitionEOF event, which may have
// waited in the reader's queue while the follower appended a repair.
func (s *Store) checkEnd(f *follower, gs []*grant) {
	asked := time.Now()
	f.endChecked = asked
	if f.next < 0 {
		return
	}
	_, hi, err := f.c.QueryWatermarkOffsets(f.topic, f.partition, int(endCheckInterval/time.Millisecond))
	if err != nil || hi != f.next {
		return
	}
	s.reachedEnd(gs, hi, asked.Add(-endMargin))
}

// reachedEnd records that the follower has passed gs every entry up to
// end, and that no entry from there on was appended before at.
func (s *Store) reachedEnd(gs []*grant, end int64, at time.Time) {
	for _, g := range gs {
		g.mu.Lock()
		if end >= g.from && end >= g.through { // the same end again is newer
			g.through, g.throughAt = end, at
		}
		g.mu.Unlock()
	}
}

// spoilAll marks gs as no copies to restore from.
func (s *Store) spoilAll(gs []*grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range gs {
		g.spoiled = true
	}
}

// observe passes e, read at offset, to the grants of gs that hold its key
// and had not read it in their restore, and appends the repairs they ask
// for.
func (s *Store) observe(ctx context.Context, gs []*grant, offset int64, e keystate.Entry) {
	h := ledger.Hash(e.Key, 0)
	for _, g := range gs {
		if offset < g.from || !g.rng.Contains(h) {
			continue
		}
		if e.Fence > g.token {
			// A later owner's change: the member has lost the key,
			// and its table is no copy of it (copies.go).
			s.mu.Lock()
			g.shadowLocked(hashAt(h))
			s.mu.Unlock()
		}
		g.mu.Lock()
		repair, ok, err := g.table.Observe(e, g.token)
		g.mu.Unlock()
		switch {
		case err != nil:
			s.log.Error("a late change does not fit the range's state; giving the range's state up", "topic", g.topic, "partition", g.partition, "range", g.rng.String(), "error", err)
			s.giveUp(g)
		case ok:
			s.repairs.Add(1)
			if err := appendEntry(ctx, s.producer, s.changelog[g.topic], g.partition, repair, &g.appends); err != nil {
				s.log.Error("append a repair of a late change; giving the range's state up, its next record restores it", "topic", g.topic, "partition", g.partition, "error", err)
				s.giveUp(g)
			}
		}
	}
}

// followChangelog is the follower at work: a test turns it off to see a
// late change left as its key's last record.
var followChangelog = true

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
