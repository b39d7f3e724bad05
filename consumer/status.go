package consumer

import (
	"cmp"
	"slices"
	"time"

	"github.com/keyshare/keyshare/assign"
)

// Status is a snapshot of a member's state.
type Status struct {
	MemberID   string
	Running    bool // has a session
	Leader     bool
	Generation int64
	Ranges     []RangeStatus
	InFlight   int
	// InFlightBytes: the keys, values and headers of the records in flight.
	InFlightBytes int64
	Unflushed     int  // records completed since the last flush that reached etcd
	Paused        bool // fetching paused in librdkafka (in-flight bound, or GroupPaused)
	// GroupPaused: an operator paused the group (keyshare group pause).
	GroupPaused  bool
	StuckKeys    []StuckKey
	Handled      int64 // records handled (successfully) since start
	Failed       int64 // handler failures (each attempt)
	Retried      int64
	DeadLettered int64
	Flushes      int64
	FlushBytes   int64 // keys and values written by flushes
	Fetched      int64 // records fetched, including those passed over
	Commits      int64 // Kafka commits made while leader
	// RetentionLosses counts the loss reports this member wrote: ranges
	// that found records deleted from Kafka before they were handled.
	RetentionLosses int64
	// Halted lists the partitions held because Kafka deleted records not
	// yet handled (RetentionLoss "halt").
	Halted []assign.TopicPartition
	// AboveLogEnd lists the assigned partitions whose position is above
	// the log end (the log was truncated, or the topic recreated): they are
	// not fetched until an operator acts. See docs/consumer.md.
	AboveLogEnd []AboveLogEnd
}

// RangeStatus is one owned range.
type RangeStatus struct {
	Topic     string
	Partition int32
	Lo, Hi    uint64
	State     string
	Watermark int64
	Pending   int // pending offsets (in flight here, or inherited)
	InFlight  int
	// OldestSince is when the oldest record in flight was handed to a
	// worker (zero if none).
	OldestSince time.Time
	// Stuck is true while the watermark has not moved for StuckTimeout
	// with later records fetched.
	Stuck bool
	// HotKeys are the keys that took the most handler time, busiest
	// first, at most assign.MaxHotKeys, as the member's last load report
	// measured them (every LoadReportInterval), each with at least 1% of
	// the range's busy time or a tenth of a worker (state.NotableHotKey);
	// none while the range is handed over or before its first report.
	HotKeys []HotKey
}

// HotKey is one of the keys that took the most of a range's handler time.
type HotKey struct {
	// Key is the record key as text for display: its first 64 bytes,
	// escaped when they hold a byte that is not printable (quoted Go-style,
	// "\x1b[2J" for ESC [ 2 J) and followed by the key's length when cut
	// ("... (300 bytes)"); textsafe's rules. Two keys may show the same
	// text when their first 64 bytes and length agree.
	Key string
	// BusyPerSec is the worker-seconds per second the key's records held a
	// worker: a lower bound (the summary that finds hot keys may
	// undercount a key by the range's busy time over 16). Near 1 the key
	// keeps one worker busy all the time, and its order lets no other
	// worker help: more members or workers do not make it faster.
	BusyPerSec float64
	// Share is BusyPerSec over the range's: the part of the range's
	// handler time the key took, 0 to 1.
	Share float64
}

// StuckKey is an in-flight record that has failed or has run for longer
// than Config.StuckTimeout.
type StuckKey struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Since     time.Time
	Attempts  int
	LastError string
}

// Status returns the member's current state.
func (c *Consumer) Status() Status {
	s := Status{
		MemberID:     c.cfg.MemberID,
		Handled:      c.metrics.handled.Load(),
		Failed:       c.metrics.failed.Load(),
		Retried:      c.metrics.retried.Load(),
		DeadLettered: c.metrics.deadLettered.Load(),
		Flushes:      c.metrics.flushes.Load(),
		FlushBytes:   c.metrics.flushBytes.Load(),
		Fetched:      c.metrics.fetched.Load(),
		Commits:      c.metrics.commits.Load(),
	}
	s.RetentionLosses = c.metrics.retentionLosses.Load()
	c.mu.Lock()
	p, sess := c.mu.p, c.mu.sess
	c.mu.Unlock()
	if p == nil {
		return s
	}
	s.Running, s.Leader = true, sess.IsLeader()
	p.mu.Lock()
	defer p.mu.Unlock()
	s.Generation, s.InFlight, s.Paused, s.Unflushed = p.mu.gen, p.mu.inflight, p.mu.paused, p.mu.unflushed
	s.InFlightBytes = p.mu.inflightBytes
	s.GroupPaused = p.mu.held && p.mu.heldKnown
	for t := range p.mu.halted {
		s.Halted = append(s.Halted, t)
	}
	slices.SortFunc(s.Halted, func(a, b assign.TopicPartition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	for t, a := range p.mu.aboveEnd {
		if p.mu.assigned[t] {
			s.AboveLogEnd = append(s.AboveLogEnd, *a)
		}
	}
	slices.SortFunc(s.AboveLogEnd, func(a, b AboveLogEnd) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	for _, w := range p.mu.ranges {
		r := w.st.Range()
		s.Ranges = append(s.Ranges, RangeStatus{
			Topic: w.rs.Record.Topic, Partition: w.rs.Record.Partition, Lo: r.Lo, Hi: r.Hi,
			State: w.rs.Record.State, Watermark: w.st.Watermark(), Pending: w.st.Pending(), InFlight: p.inFlightLocked(w),
			OldestSince: p.oldestLocked(w), Stuck: w.stuck, HotKeys: slices.Clone(w.hot),
		})
	}
	slices.SortFunc(s.Ranges, func(a, b RangeStatus) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Lo, b.Lo))
	})
	now := time.Now()
	for t, jobs := range p.mu.jobs {
		for j := range jobs.all() {
			if j.m.Key != nil && p.preludeFailingLocked(t, j.m.Key) {
				continue // waits behind its key's prelude, listed below
			}
			since := j.since()
			if attempts, lastErr := j.failures(); attempts > 0 || now.Sub(since) > c.cfg.StuckTimeout {
				s.StuckKeys = append(s.StuckKeys, StuckKey{Topic: t.Topic, Partition: t.Partition, Offset: j.o, Key: string(j.m.Key), Since: since, Attempts: attempts, LastError: lastErr})
			}
		}
	}
	// A prelude's failing record is its key's stuck record, whether or
	// not a live record of the key waits behind it (prelude.go).
	for t, runs := range p.mu.preludes {
		for run := range runs {
			if f := run.failing; f != nil {
				s.StuckKeys = append(s.StuckKeys, StuckKey{Topic: t.Topic, Partition: t.Partition, Offset: f.offset, Key: string(run.key),
					Since: f.since, Attempts: f.attempts, LastError: f.describe(run.op)})
			}
		}
	}
	slices.SortFunc(s.StuckKeys, func(a, b StuckKey) int { return a.Since.Compare(b.Since) })
	return s
}
