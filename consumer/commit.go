package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
	"github.com/keyshare/keyshare/coord"
)

// commitOffsets is Kafka's side of the leader's commit rounds, which coord
// runs while this member leads (coord.Config.Offsets).
func (c *Consumer) commitOffsets() *kafkaOffsets {
	return &kafkaOffsets{kc: c.kc, log: c.log.Named("commit"), group: c.cfg.Group, member: c.cfg.MemberID}
}

// onCommitRound records a round's figures. A partition whose end offset
// the round could not learn keeps the end it last had: a read that timed
// out must not make its lag gauge jump.
func (c *Consumer) onCommitRound(r coord.CommitRound) {
	c.metrics.commits.Add(int64(r.Committed))
	c.metrics.commitRepairs.Add(int64(r.Repairs))
	g := make(map[tp]partitionGauges, len(r.Partitions))
	c.mu.Lock()
	defer c.mu.Unlock()
	for part, p := range r.Partitions {
		end := p.End
		if last, ok := c.mu.partitions[part]; ok && end < 0 {
			end = last.end
		}
		g[part] = partitionGauges{end: end, safe: p.Safe, committed: p.Committed}
	}
	c.mu.partitions = g
}

// kafkaOffsets is coord.Offsets on librdkafka: each call is a few requests
// for all partitions, sent at once (or librdkafka's cache), and returns by
// the context's deadline. librdkafka's CommitOffsets takes no timeout, so
// it runs in its own goroutine, one at a time: a round that cannot wait
// for it moves on, and the next round skips committing until it has
// returned (Kafka's answer then shows in the next read of the committed
// offsets).
type kafkaOffsets struct {
	kc     *kafka.Consumer
	log    hclog.Logger
	group  string
	member string // the commits' mark names it (coord.CommitMark)

	mu       sync.Mutex
	inflight chan struct{} // closed when the running commit returns; nil if none
	warned   bool          // the plain-group warning was logged

	// waited is the fetched partitions the last Ends left out for want of
	// a cached end (only the commit loop calls Ends).
	waited map[tp]bool
}

var errCommitInFlight = errors.New("consumer: the previous commit to Kafka has not returned yet; committing next round")

func timeoutMs(ctx context.Context, d time.Duration) int {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(1, int(d/time.Millisecond))
}

// Committed reads the group's committed offsets and who committed them:
// the writer keyshare's mark in an offset's metadata names
// (coord.CommitWriter). A partition the broker refused is left out (the
// round then goes by the offset it last knew Kafka to hold).
func (k *kafkaOffsets) Committed(ctx context.Context, parts []tp) (map[tp]coord.KafkaOffset, error) {
	got, _, err := kafkaoffsets.CommittedWithMetadata(k.kc, parts, timeoutMs(ctx, time.Minute))
	offsets := make(map[tp]coord.KafkaOffset, len(got))
	for p, o := range got {
		ko := coord.KafkaOffset{Offset: o.Offset}
		if o.Offset >= 0 {
			ko.By = coord.CommitWriter(o.Metadata)
		}
		offsets[p] = ko
	}
	return offsets, explainKafka(err)
}

// Commit commits all offsets, marked as this member's, in OffsetCommit
// requests of kafkaoffsets.Chunk partitions sent at once.
func (k *kafkaOffsets) Commit(ctx context.Context, offsets map[tp]int64) (map[tp]error, error) {
	k.mu.Lock()
	if k.inflight != nil {
		k.mu.Unlock()
		return nil, errCommitInFlight
	}
	done := make(chan struct{})
	k.inflight = done
	k.mu.Unlock()

	parts := make([]kafka.TopicPartition, 0, len(offsets))
	for p, o := range offsets {
		topic := p.Topic
		parts = append(parts, kafka.TopicPartition{Topic: &topic, Partition: p.Partition, Offset: kafka.Offset(o)})
	}
	kafkaoffsets.SetMetadata(parts, coord.CommitMark(k.member))
	type result struct {
		res []kafka.TopicPartition
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var mu sync.Mutex
		var res []kafka.TopicPartition
		err := kafkaoffsets.InChunks(parts, func(c []kafka.TopicPartition) error {
			r, err := k.kc.CommitOffsets(c)
			mu.Lock()
			res = append(res, r...)
			mu.Unlock()
			return err
		})
		ch <- result{res, err}
		k.mu.Lock()
		k.inflight = nil
		k.mu.Unlock()
		close(done)
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.err != nil {
			k.explain(r.err)
			return nil, r.err
		}
		var failed map[tp]error
		for _, p := range r.res {
			if p.Error != nil && p.Topic != nil {
				if failed == nil {
					failed = make(map[tp]error)
				}
				failed[tp{Topic: *p.Topic, Partition: p.Partition}] = p.Error
				k.explain(p.Error)
			}
		}
		return failed, nil
	}
}

// wait waits for a commit still running (the consumer closes after).
func (k *kafkaOffsets) wait() {
	k.mu.Lock()
	done := k.inflight
	k.mu.Unlock()
	if done != nil {
		<-done
	}
}

// explain logs, once, a refusal that needs the operator.
func (k *kafkaOffsets) explain(err error) {
	if !plainGroupLive(err) {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.warned {
		return
	}
	k.warned = true
	k.log.Error("Kafka refuses keyshare's commits: a plain Kafka consumer group with live members uses this group id, and it would fight keyshare over the committed offset; stop it (keyshare goes on committing once it has gone)",
		"group", k.group, "error", err)
}

// Ends returns end offsets from librdkafka's cache for the partitions this
// member fetches (no broker call), and asks for the others
// (kafkaoffsets.List). A partition it fetches with no end cached yet, just
// taken over, is left out once: its first fetch response brings the end.
// (After a leave at P = 4,096 with two members, asking for the 2,048
// partitions the leader had just taken over took the rest of its commit
// round.) If the next call still finds no end cached, it asks. With an
// error it returns what the other requests read.
func (k *kafkaOffsets) Ends(ctx context.Context, parts []tp) (map[tp]int64, error) {
	out := make(map[tp]int64, len(parts))
	fetched := make(map[tp]bool)
	if assigned, err := k.kc.Assignment(); err == nil {
		for _, p := range assigned {
			if p.Topic != nil {
				fetched[tp{Topic: *p.Topic, Partition: p.Partition}] = true
			}
		}
	}
	var ask []tp
	waiting := make(map[tp]bool)
	for _, part := range parts {
		if _, end, err := k.kc.GetWatermarkOffsets(part.Topic, part.Partition); err == nil && end >= 0 {
			out[part] = end
			continue
		}
		if fetched[part] && !k.waited[part] {
			waiting[part] = true
			continue
		}
		ask = append(ask, part)
	}
	k.waited = waiting
	if len(ask) == 0 {
		return out, nil
	}
	a, err := kafka.NewAdminClientFromConsumer(k.kc)
	if err != nil {
		return out, err
	}
	defer a.Close()
	// The log end, as librdkafka's cached watermark and
	// kafka-consumer-groups have it, whatever isolation.level says.
	ends, _, err := kafkaoffsets.List(ctx, a, ask, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted)
	for p, end := range ends {
		if end >= 0 {
			out[p] = end
		}
	}
	return out, explainKafka(err)
}

// commitErr is the error of a CommitOffsets call: the call's own, or the
// first partition's.
func commitErr(res []kafka.TopicPartition, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}

// plainGroupLive reports whether a commit was refused because the group id
// has live members of a plain consumer group: the coordinator accepts a
// standalone commit (no member id, no generation) only for a group with no
// members.
func plainGroupLive(err error) bool {
	var kerr kafka.Error
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr.Code() {
	case kafka.ErrUnknownMemberID, kafka.ErrIllegalGeneration, kafka.ErrStaleMemberEpoch, kafka.ErrRebalanceInProgress:
		return true
	}
	return false
}
