package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/coord"
)

// startOffsets is startOffset for many partitions in a fixed number of
// requests (issue 14): one etcd transaction for the recorded commits, one
// Committed request, and one ListOffsets request for each of the log start
// and end of the partitions that have neither. Asked one partition at a
// time, a member of a new group of 1,024 partitions took four minutes to
// start fetching. A partition whose offset cannot be learned is left out
// of the answer with its error in errs.
func (c *Consumer) startOffsets(ctx context.Context, sess *coord.Session, parts []tp) (map[tp]int64, map[tp]error) {
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
		fail(parts, err)
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
	// consumer group), in one request.
	timeout := int(c.cfg.StartTimeout / time.Millisecond)
	committed, err := c.kc.Committed(kparts(todo), timeout)
	var kerr kafka.Error
	if errors.As(err, &kerr) && kerr.Code() == kafka.ErrGroupIDNotFound {
		committed, err = nil, nil // the group has never committed
	}
	if err != nil {
		fail(todo, fmt.Errorf("read committed offsets of %d partitions: %w", len(todo), err))
		return out, errs
	}
	known := make(map[tp]bool)
	for _, r := range committed {
		if r.Topic != nil && r.Error == nil && r.Offset >= 0 {
			p := tp{Topic: *r.Topic, Partition: r.Partition}
			out[p], known[p] = int64(r.Offset), true
		}
	}
	rest := todo[:0:0]
	for _, p := range todo {
		if !known[p] {
			rest = append(rest, p)
		}
	}
	if len(rest) == 0 {
		return out, errs
	}
	// AutoOffsetReset: the log start or end, in one ListOffsets request.
	spec := kafka.EarliestOffsetSpec
	if c.cfg.AutoOffsetReset == "latest" {
		spec = kafka.LatestOffsetSpec
	}
	ask := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(rest))
	for _, kp := range kparts(rest) {
		ask[kp] = spec
	}
	a, err := kafka.NewAdminClientFromConsumer(c.kc)
	if err != nil {
		fail(rest, err)
		return out, errs
	}
	defer a.Close()
	lctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	res, err := a.ListOffsets(lctx, ask)
	if err != nil {
		fail(rest, fmt.Errorf("read log offsets of %d partitions: %w", len(rest), err))
		return out, errs
	}
	for kp, r := range res.ResultInfos {
		if kp.Topic == nil {
			continue
		}
		p := tp{Topic: *kp.Topic, Partition: kp.Partition}
		if r.Error.Code() != kafka.ErrNoError || r.Offset < 0 {
			errs[p] = fmt.Errorf("read log offsets of %s/%d: %v", p.Topic, p.Partition, r.Error)
			continue
		}
		out[p] = int64(r.Offset)
	}
	for _, p := range rest {
		if _, ok := out[p]; !ok {
			if _, bad := errs[p]; !bad {
				errs[p] = fmt.Errorf("read log offsets of %s/%d: no answer", p.Topic, p.Partition)
			}
		}
	}
	return out, errs
}
