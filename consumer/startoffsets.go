package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
	"github.com/keyshare/keyshare/coord"
)

// startOffsets is startOffset for many partitions in a fixed number of
// requests: one etcd transaction for the recorded commits, then
// Kafka's committed offsets, then the log start or end of the partitions
// that have neither, each in requests of kafkaoffsets.Chunk partitions
// sent at once. Asked one partition at a time, a member of a new group of
// 1,024 partitions took four minutes to start fetching. A partition whose
// offset cannot be learned now is left out of the answer with its error in
// errs, for the caller to try again; while that lasts it is one of the
// member's problems (retry.go). An answer no retry can fix (the principal
// may not read the group's offsets) is refused instead.
func (c *Consumer) startOffsets(ctx context.Context, sess *coord.Session, parts []tp) (out map[tp]int64, errs map[tp]error, refused error) {
	out, errs = c.readStartOffsets(ctx, sess, parts)
	var first *tp
	for p, err := range errs {
		if !retriable(err) {
			return nil, nil, fmt.Errorf("consumer: find where new ranges start: %w", err)
		}
		if first == nil || p.Topic < first.Topic || p.Topic == first.Topic && p.Partition < first.Partition {
			first = &p
		}
	}
	if first == nil {
		c.problems.resolve(startProblem, c.memberLog())
	} else if ctx.Err() == nil {
		c.problems.report(c.memberLog(), startProblem, errs[*first], "topic", first.Topic, "partition", first.Partition, "partitions_failed", len(errs))
	}
	return out, errs, nil
}

// startProblem names startOffsets' trouble for the log and /readyz.
const startProblem = "find where new ranges start"

// readStartOffsets is startOffsets without the classification of errors.
func (c *Consumer) readStartOffsets(ctx context.Context, sess *coord.Session, parts []tp) (map[tp]int64, map[tp]error) {
	out := make(map[tp]int64, len(parts))
	errs := make(map[tp]error)
	if len(parts) == 0 {
		return out, errs
	}
	fail := func(todo []tp, err error) {
		for _, p := range todo {
			errs[p] = err
		}
	}
	// The offsets the leader recorded.
	recs, bad, err := sess.RecordedCommits(ctx, parts)
	if err != nil {
		fail(parts, fmt.Errorf("read the recorded commits from etcd: %w", err))
		return out, errs
	}
	todo := parts[:0:0]
	for _, p := range parts {
		if rec, ok := recs[p]; ok {
			out[p] = rec.Offset
			continue
		}
		if err := bad[p]; err != nil {
			c.log.Error("recorded commit unreadable; using Kafka's", "error", err)
		}
		todo = append(todo, p)
	}
	if len(todo) == 0 {
		return out, errs
	}
	// The group's committed Kafka offsets (a group moving from a plain
	// consumer group).
	committed, refused, err := kafkaoffsets.Committed(c.kc, todo, int(c.cfg.StartTimeout/time.Millisecond))
	if err != nil {
		fail(todo, fmt.Errorf("read committed offsets of %d partitions: %w", len(todo), explainKafka(err)))
		return out, errs
	}
	// Only a partition Kafka says has no committed offset starts at
	// AutoOffsetReset: one whose offset could not be read is not started
	// (at "latest" it would skip records).
	rest := todo[:0:0]
	for _, p := range todo {
		o, ok := committed[p]
		switch {
		case refused[p] != nil:
			errs[p] = fmt.Errorf("read the committed offset of %s/%d: %w", p.Topic, p.Partition, explainKafka(refused[p]))
		case ok && o >= 0:
			out[p] = o
		case ok:
			rest = append(rest, p)
		default:
			errs[p] = fmt.Errorf("read the committed offset of %s/%d: no answer", p.Topic, p.Partition)
		}
	}
	if len(rest) == 0 {
		return out, errs
	}
	c.resetOffsets(ctx, rest, out, errs)
	return out, errs
}

// resetOffsets sets in out the start offsets of rest, partitions with no
// committed offset, at AutoOffsetReset: the log start or end; a partition
// whose offset cannot be read gets its error in errs.
func (c *Consumer) resetOffsets(ctx context.Context, rest []tp, out map[tp]int64, errs map[tp]error) {
	fail := func(todo []tp, err error) {
		for _, p := range todo {
			errs[p] = err
		}
	}
	// AutoOffsetReset: the log start or end.
	spec := kafka.EarliestOffsetSpec
	if c.cfg.AutoOffsetReset == OffsetLatest {
		spec = kafka.LatestOffsetSpec
	}
	a, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		fail(rest, fmt.Errorf("admin client: %w", err))
		return
	}
	defer a.Close()
	lctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	logOffsets, refused, err := kafkaoffsets.List(lctx, a, rest, spec, kafkaoffsets.Isolation(c.cfg.Kafka))
	if err != nil {
		fail(rest, fmt.Errorf("read log offsets of %d partitions: %w", len(rest), explainKafka(err)))
		return
	}
	for p, e := range refused {
		errs[p] = fmt.Errorf("read log offsets of %s/%d: %w", p.Topic, p.Partition, explainKafka(e))
	}
	for p, o := range logOffsets {
		if o < 0 {
			errs[p] = fmt.Errorf("read log offsets of %s/%d: offset %d", p.Topic, p.Partition, o)
			continue
		}
		out[p] = o
	}
	for _, p := range rest {
		if _, ok := out[p]; !ok {
			if _, bad := errs[p]; !bad {
				errs[p] = fmt.Errorf("read log offsets of %s/%d: no answer", p.Topic, p.Partition)
			}
		}
	}
}
