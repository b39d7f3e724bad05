package consumer

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/coord"
)

// commitLoop runs on the leader: the commit protocol itself is the
// leader's (coord.Leader.RunCommits); this side gives it Kafka (kafkaOffsets)
// and takes each round's figures for the metrics.
func (c *Consumer) commitLoop(ctx context.Context, l *coord.Leader) {
	defer func() {
		c.mu.Lock()
		c.mu.partitions = nil // only the leader knows these
		c.mu.Unlock()
	}()
	ko := &kafkaOffsets{kc: c.kc, log: c.log.Named("commit"), group: c.cfg.Group}
	l.RunCommits(ctx, coord.CommitConfig{
		Offsets:  ko,
		Interval: c.cfg.CommitInterval,
		Logger:   c.log.Named("commit"),
		OnRound:  c.onCommitRound,
	})
	ko.wait()
}

// onCommitRound records a round's figures.
func (c *Consumer) onCommitRound(r coord.CommitRound) {
	c.metrics.commits.Add(int64(r.Committed))
	c.metrics.commitRepairs.Add(int64(r.Repairs))
	g := make(map[tp]partitionGauges, len(r.Partitions))
	for part, p := range r.Partitions {
		g[part] = partitionGauges{end: p.End, safe: p.Safe, committed: p.Committed}
	}
	c.mu.Lock()
	c.mu.partitions = g
	c.mu.Unlock()
}

// kafkaOffsets is coord.Offsets on librdkafka: each call is a few requests
// for all partitions, sent at once (or librdkafka's cache), and returns by
// the context's deadline. librdkafka's CommitOffsets takes no timeout, so
// it runs in its own goroutine, one at a time: a round that cannot wait
// for it moves on, and the next round skips committing until it has
// returned (Kafka's answer then shows in the next read of the committed
// offsets).
type kafkaOffsets struct {
	kc    *kafka.Consumer
	log   hclog.Logger
	group string

	mu       sync.Mutex
	inflight chan struct{} // closed when the running commit returns; nil if none
	warned   bool          // the plain-group warning was logged
}

var errCommitInFlight = errors.New("consumer: the previous commit to Kafka has not returned yet; committing next round")

func timeoutMs(ctx context.Context, d time.Duration) int {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(1, int(d/time.Millisecond))
}

func kparts(parts []tp) []kafka.TopicPartition {
	out := make([]kafka.TopicPartition, len(parts))
	for i, p := range parts {
		topic := p.Topic
		out[i] = kafka.TopicPartition{Topic: &topic, Partition: p.Partition}
	}
	return out
}

// offsetChunk is how many partitions one OffsetFetch, OffsetCommit or
// ListOffsets request carries. Handling such a request costs librdkafka (or
// kfake) time that grows with the square of its partitions: against kfake
// on this project's 2-core machine, reading 4,096 committed offsets took
// 78–98 ms in one request and 8 ms in 16 requests of 256 sent at once;
// committing them took 42 ms in one request and 13 ms in 16 sent one after
// another; reading 3,840 end offsets took 118–131 ms (125–146 ms of CPU)
// in one request and 28–30 ms (43–45 ms of CPU) in 15 sent at once. At
// P = 4,096 the leader read them every round, and that CPU was taken from
// everything else on the machine.
const offsetChunk = 256

// chunks cuts parts into requests of at most offsetChunk partitions.
func chunks[T any](parts []T) [][]T {
	var out [][]T
	for len(parts) > 0 {
		n := min(len(parts), offsetChunk)
		out = append(out, parts[:n])
		parts = parts[n:]
	}
	return out
}

// eachChunk runs f on each chunk of parts, all at once, and returns the
// first error.
func eachChunk[T any](parts []T, f func([]T) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for _, c := range chunks(parts) {
		wg.Go(func() {
			if err := f(c); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// Committed reads the group's committed offsets, in OffsetFetch requests
// of offsetChunk partitions sent at once. With an error it returns what
// the other requests read.
func (k *kafkaOffsets) Committed(ctx context.Context, parts []tp) (map[tp]int64, error) {
	var mu sync.Mutex
	out := make(map[tp]int64, len(parts))
	err := eachChunk(kparts(parts), func(c []kafka.TopicPartition) error {
		res, err := k.kc.Committed(c, timeoutMs(ctx, time.Minute))
		mu.Lock()
		defer mu.Unlock()
		var kerr kafka.Error
		if errors.As(err, &kerr) && kerr.Code() == kafka.ErrGroupIDNotFound {
			// The group has never committed (some brokers say so this way).
			for _, p := range c {
				out[tp{Topic: *p.Topic, Partition: p.Partition}] = -1
			}
			return nil
		}
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Topic == nil || r.Error != nil {
				continue
			}
			out[tp{Topic: *r.Topic, Partition: r.Partition}] = max(int64(r.Offset), -1)
		}
		return nil
	})
	return out, err
}

// Commit commits all offsets, in OffsetCommit requests of offsetChunk
// partitions sent at once.
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
	type result struct {
		res []kafka.TopicPartition
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var mu sync.Mutex
		var res []kafka.TopicPartition
		err := eachChunk(parts, func(c []kafka.TopicPartition) error {
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
// member fetches (no broker call), and asks for the others in ListOffsets
// requests of offsetChunk partitions sent at once. With an error it returns
// what the other requests read.
func (k *kafkaOffsets) Ends(ctx context.Context, parts []tp) (map[tp]int64, error) {
	out := make(map[tp]int64, len(parts))
	var ask []kafka.TopicPartition
	for _, part := range parts {
		if _, end, err := k.kc.GetWatermarkOffsets(part.Topic, part.Partition); err == nil && end >= 0 {
			out[part] = end
			continue
		}
		topic := part.Topic
		ask = append(ask, kafka.TopicPartition{Topic: &topic, Partition: part.Partition})
	}
	if len(ask) == 0 {
		return out, nil
	}
	a, err := kafka.NewAdminClientFromConsumer(k.kc)
	if err != nil {
		return out, err
	}
	defer a.Close()
	var mu sync.Mutex
	err = eachChunk(ask, func(c []kafka.TopicPartition) error {
		specs := make(map[kafka.TopicPartition]kafka.OffsetSpec, len(c))
		for _, p := range c {
			specs[p] = kafka.LatestOffsetSpec
		}
		res, err := a.ListOffsets(ctx, specs)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for kp, r := range res.ResultInfos {
			if kp.Topic != nil && r.Error.Code() == kafka.ErrNoError && r.Offset >= 0 {
				out[tp{Topic: *kp.Topic, Partition: kp.Partition}] = int64(r.Offset)
			}
		}
		return nil
	})
	return out, err
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
