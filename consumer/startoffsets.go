package consumer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/keys"
)

// startOffsets is startOffset for many partitions in a fixed number of
// requests (issue 14): one etcd transaction for the recorded commits, one
// Committed request, and one ListOffsets request for each of the log start
// and end of the partitions that have neither. Asked one partition at a
// time, a member of a new group of 1,024 partitions took four minutes to
// start fetching. A partition whose offset cannot be learned is left out
// of the answer with its error in errs.
func (c *Consumer) startOffsets(ctx context.Context, s keys.Schema, parts []tp) (map[tp]int64, map[tp]error) {
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
	// The offsets the leader recorded, MaxTxnOps gets per transaction.
	todo := parts[:0:0]
	per := 64
	for i := 0; i < len(parts); i += per {
		batch := parts[i:min(i+per, len(parts))]
		ops := make([]clientv3.Op, len(batch))
		for j, p := range batch {
			ops[j] = clientv3.OpGet(s.Commit(p.Topic, p.Partition))
		}
		resp, err := c.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			fail(batch, fmt.Errorf("read recorded commit: %w", err))
			continue
		}
		for j, p := range batch {
			kvs := resp.Responses[j].GetResponseRange().Kvs
			if len(kvs) == 1 {
				rec, err := coord.DecodeCommit(string(kvs[0].Key), kvs[0].Value)
				if err == nil {
					out[p] = rec.Offset
					continue
				}
				c.log.Error("recorded commit unreadable; using Kafka's", "error", err)
			}
			todo = append(todo, p)
		}
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
