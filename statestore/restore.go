package statestore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// Restoring a range: reading its changelog partition from the start to
// the end offset read when the restore began.

// restoreProgress is how far a grant's restore has read, for Status.
type restoreProgress struct {
	started time.Time
	end     atomic.Int64 // the partition's end offset when it began; -1 until read
	next    atomic.Int64 // the next offset to read
	kept    atomic.Int64 // keys of the range kept so far
	done    atomic.Bool
	// from is the offset the read began at, fromCopy whether the restore
	// went on from the member's copy; the restore alone uses them.
	from     int64
	fromCopy bool
}

// restore builds g's table: it waits for the calls and appends still on
// their way under the retired grants g overlaps (waitFor), reads g's changelog partition, keeps per
// key the entry the restore rule picks, appends the repairs the rule
// asks for, and then makes g ready.
func (s *Store) restore(ctx context.Context, g *grant, waitFor []*grant) {
	err := s.restoreTable(ctx, g, waitFor)
	var keys int
	var bytes int64
	if err == nil {
		keys, bytes = g.table.Len(), g.table.Bytes() // before the range's records may change it
	}
	g.err = err
	g.progress.done.Store(true)
	close(g.ready)
	if err != nil {
		s.giveUp(g) // the next record of the range tries again
		s.log.Error("restore of a range's state failed; its records wait and try again", "topic", g.topic, "partition", g.partition, "range", g.rng.String(), "error", err)
		return
	}
	s.restores.Add(1)
	s.follow(g)
	s.log.Info("range state restored", "topic", g.topic, "partition", g.partition, "range", g.rng.String(), "token", g.token,
		"keys", keys, "bytes", bytes, "read_from", g.progress.from, "read_to", g.progress.end.Load(), "from_copy", g.progress.fromCopy,
		"took", time.Since(g.progress.started).Round(time.Millisecond))
}

func (s *Store) restoreTable(ctx context.Context, g *grant, waitFor []*grant) error {
	for _, o := range waitFor {
		o.calls.Wait()
		o.appends.Wait()
	}
	rs, from, written, err := s.startRestore(g)
	if err != nil {
		return err
	}
	cl := s.changelog[g.topic]
	readAt := time.Now()
	g.progress.from = from
	// A later owner's entry of a key in the range: g's table is no copy
	// of that key (copies.go). The partition holds other ranges' entries
	// too, whose owners' tokens say nothing of this range.
	var later ledger.HashRange
	err = s.readChangelogFrom(ctx, cl, g.partition, from, &g.progress, func(e keystate.Entry) error {
		if e.Fence > g.token {
			if h := ledger.Hash(e.Key, 0); g.rng.Contains(h) {
				later = spanning(later, hashAt(h))
			}
		}
		if g.progress.fromCopy && !readCopyTail {
			return nil // the switch-off: the copy alone
		}
		return rs.Add(e)
	})
	if !later.Empty() {
		s.mu.Lock()
		g.shadowLocked(later)
		s.mu.Unlock()
	}
	if werr := written(err == nil); err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	table, repairs, err := rs.Table(g.token)
	if err != nil {
		return err
	}
	g.progress.kept.Store(int64(table.Len()))
	for _, e := range repairs {
		if err := appendEntry(ctx, s.producer, cl, g.partition, e, &g.appends); err != nil {
			return fmt.Errorf("statestore: append a repair of range %s of %s/%d: %w", g.rng, g.topic, g.partition, err)
		}
	}
	g.from = g.progress.end.Load()
	g.mu.Lock()
	g.table = table
	g.through, g.throughAt = g.from, readAt // nothing at or past the end offset was appended before it was read
	g.mu.Unlock()
	return nil
}

// startRestore returns the restore of g's range and the changelog offset
// to read from: in memory, from the start; on disk, from the copies that
// hold all of the range, if they do (copies.go), else from the start
// after clearing the range's span. The caller calls written once the read
// is done (ok) or failed: on disk the restore's writes are batched until
// then.
func (s *Store) startRestore(g *grant) (rs *keystate.Restore, from int64, written func(ok bool) error, err error) {
	if s.disk == nil {
		rs, err := keystate.NewRestore(g.rng, s.cfg.Table)
		return rs, 0, func(bool) error { return nil }, err
	}
	if err := s.mendCopies(); err != nil {
		return nil, 0, nil, err
	}
	pk := partitionKey{g.topic, g.partition}
	from, ok := s.cover(g.rng, g.parts)
	if !ok {
		if err := s.disk.clear(pk, g.rng); err != nil {
			return nil, 0, nil, err
		}
		from = 0
	}
	slots := s.disk.slots(pk, g.rng)
	t, err := keystate.OpenTable(g.rng, s.cfg.Table, slots)
	if err != nil {
		return nil, 0, nil, err
	}
	slots.startBatch()
	if ok {
		s.fromCopy.Add(1)
		g.progress.fromCopy = true
	}
	return keystate.RestoreOn(t), from, slots.endBatch, nil
}

// readCopyTail is the changelog's tail read after a copy: a test turns it
// off to see the changes other members made since the copy lost.
var readCopyTail = true

// readChangelog passes each entry of partition of changelog topic, from
// its start to the end offset read first, to add in order.
func (s *Store) readChangelog(ctx context.Context, topic string, partition int32, pr *restoreProgress, add func(keystate.Entry) error) error {
	return s.readChangelogFrom(ctx, topic, partition, 0, pr, add)
}

// readChangelogFrom is readChangelog from offset from (or the partition's
// start, if later).
func (s *Store) readChangelogFrom(ctx context.Context, topic string, partition int32, from int64, pr *restoreProgress, add func(keystate.Entry) error) error {
	c, err := s.newReader()
	if err != nil {
		return err
	}
	defer c.Close()
	lo, hi, err := c.QueryWatermarkOffsets(topic, partition, int(time.Minute/time.Millisecond))
	if err != nil {
		return fmt.Errorf("statestore: read the end offset of changelog %s/%d: %w", topic, partition, err)
	}
	lo = max(lo, from)
	pr.end.Store(hi)
	pr.next.Store(lo)
	if from > hi {
		return fmt.Errorf("statestore: changelog %s/%d ends at offset %d, below %d where the member's copy of the range was read to: the topic was recreated or truncated; the range's next record restores it from the start", topic, partition, hi, from)
	}
	if hi <= lo {
		return nil
	}
	if err := c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: partition, Offset: kafka.Offset(lo)}}); err != nil {
		return fmt.Errorf("statestore: read changelog %s/%d: %w", topic, partition, err)
	}
	for pr.next.Load() < hi {
		if err := ctx.Err(); err != nil {
			return err
		}
		switch ev := c.Poll(100).(type) {
		case *kafka.Message:
			if ev.TopicPartition.Error != nil {
				return fmt.Errorf("statestore: read changelog %s/%d: %w", topic, partition, ev.TopicPartition.Error)
			}
			e, err := DecodeMessage(ev)
			if err != nil {
				return fmt.Errorf("statestore: changelog %s/%d offset %d: %w", topic, partition, ev.TopicPartition.Offset, err)
			}
			if err := add(e); err != nil {
				return err
			}
			pr.next.Store(int64(ev.TopicPartition.Offset) + 1)
		case kafka.PartitionEOF:
			pr.next.Store(max(pr.next.Load(), int64(ev.Offset)))
		case kafka.Error:
			if ev.IsFatal() {
				return fmt.Errorf("statestore: read changelog %s/%d: %w", topic, partition, ev)
			}
			s.log.Debug("changelog reader", "error", ev)
		}
	}
	return nil
}

// newReader makes a changelog reader, its librdkafka logs going to the
// Store's logger.
func (s *Store) newReader() (*kafka.Consumer, error) {
	c, err := kafka.NewConsumer(s.readerConfig())
	if err != nil {
		return nil, fmt.Errorf("statestore: create the changelog reader: %w", err)
	}
	go consumer.ForwardLogs(s.log.Named("librdkafka"), c.Logs())
	return c, nil
}

// readerConfig is the changelog reader's: the user's connection and
// security settings, no group (it assigns its partition and commits
// nothing), and the end of the partition reported.
func (s *Store) readerConfig() *kafka.ConfigMap {
	cm := kafka.ConfigMap{}
	for k, v := range s.cfg.Kafka {
		cm[k] = v
	}
	if _, set := cm["fetch.queue.backoff.ms"]; !set {
		// librdkafka's 1 s holds the next fetch back whenever its queue
		// is past queued.min.messages (100k): a restore of 1M keys read
		// about 100k entries a second (9 s; 3-5 s at 50 ms,
		// BenchmarkRestoreFromKafka). The consumer sets the same.
		cm["fetch.queue.backoff.ms"] = 50
	}
	cm["group.id"] = "keyshare-statestore-restore" // required by the client; never joined
	cm["enable.auto.commit"] = false
	cm["enable.auto.offset.store"] = false
	cm["enable.partition.eof"] = true
	cm["auto.offset.reset"] = "earliest"
	cm["go.logs.channel.enable"] = true // newReader forwards them
	return &cm
}
