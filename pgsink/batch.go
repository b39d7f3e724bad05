package pgsink

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keyshare/keyshare/consumer"
)

// BatchHandler returns a consumer.BatchHandler that applies a batch's
// records through the sink in one transaction: one lock per partition,
// one fence check per range, an applied row per record, and effect for
// each record not applied before, in batch order (so each key's in offset
// order). A record under a stale fence gets a *FencedError
// (consumer.ErrFenced) and nothing of it is written; the batch's other
// records apply. An error of effect's or of the database fails the whole
// batch, and nothing of it is kept: the consumer retries each record
// alone.
func (s *Sink) BatchHandler(effect func(ctx context.Context, tx pgx.Tx, m *kafka.Message) error) consumer.BatchHandler {
	return func(ctx context.Context, batch []*kafka.Message) []error {
		ws := make([]write, len(batch))
		for i, m := range batch {
			f, ok := consumer.FenceOf(ctx, m)
			if !ok {
				return consumer.FailAll(len(batch), errors.New("pgsink: a record of the batch has no fence: call the sink's BatchHandler from keyshare's consumer, with the context it gives"))
			}
			ws[i] = write{f: f, offset: int64(m.TopicPartition.Offset), effect: func(ctx context.Context, tx pgx.Tx) error { return effect(ctx, tx, m) }}
		}
		return s.applyBatch(ctx, ws)
	}
}

// write is one record of a batch.
type write struct {
	f      consumer.Fence
	offset int64
	effect Effect
}

// partitionKey names a partition's lock.
type partitionKey struct {
	topic     string
	partition int32
}

// applyBatch applies ws in one transaction and returns each one's result.
func (s *Sink) applyBatch(ctx context.Context, ws []write) []error {
	for _, w := range ws {
		if err := checkWrite(w.f, w.offset); err != nil {
			return consumer.FailAll(len(ws), err)
		}
	}
	exclusive := map[partitionKey]bool{}
	res, fresh, err := s.applyBatchOnce(ctx, ws, exclusive)
	var more advanceError
	if errors.As(err, &more) {
		res, fresh, err = s.applyBatchOnce(ctx, ws, more.partitions)
	}
	if err != nil {
		return consumer.FailAll(len(ws), err)
	}
	for i, r := range res {
		switch {
		case r != nil:
			s.stats.fenced.Add(1)
		case fresh[i]:
			s.stats.applied.Add(1)
		default:
			s.stats.duplicates.Add(1)
		}
	}
	return res
}

// advanceError sends applyBatch to a second attempt, with the partitions
// whose locks it must take exclusive (a range's first write under a new
// token).
type advanceError struct{ partitions map[partitionKey]bool }

func (advanceError) Error() string { return errAdvance.Error() }

// applyBatchOnce is one attempt: the locks (exclusive for the partitions
// in exclusive, shared for the others) and fence checks in one round
// trip, then the applied rows of the records whose fence passed in a
// second, then the effects, then commit.
func (s *Sink) applyBatchOnce(ctx context.Context, ws []write, exclusive map[partitionKey]bool) (res []error, fresh []bool, err error) {
	tx, err := s.db.BeginTx(ctx, txOptions)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op once committed
	res = make([]error, len(ws))
	if !s.unfenced {
		if err := s.lockAndCheck(ctx, tx, ws, exclusive, res); err != nil {
			return nil, nil, err
		}
	}
	if fresh, err = s.insertApplied(ctx, tx, ws, res); err != nil {
		return nil, nil, err
	}
	for i, w := range ws {
		if res[i] == nil && fresh[i] {
			if err := w.effect(ctx, tx); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	return res, fresh, nil
}

// lockAndCheck takes the partitions' locks (exclusive for those in
// exclusive) and checks every fence, in one round trip. It sets res[i] for
// each write whose fence failed, and answers an advanceError when a range's
// first write under a new token needs its partition's lock exclusive.
func (s *Sink) lockAndCheck(ctx context.Context, tx pgx.Tx, ws []write, exclusive map[partitionKey]bool, res []error) error {
	// Partitions in one order, so that two batches never wait on
	// each other's locks.
	var parts []partitionKey
	checks := map[consumer.Fence]*fenceCheck{}
	for _, w := range ws {
		p := partitionKey{w.f.Topic, w.f.Partition}
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
		checks[w.f] = nil
	}
	slices.SortFunc(parts, func(a, b partitionKey) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	b := &pgx.Batch{}
	for _, p := range parts {
		queueLock(b, p.topic, p.partition, exclusive[p])
	}
	for f := range checks {
		fc := &fenceCheck{}
		checks[f] = fc
		s.queueCheck(b, f, exclusive[partitionKey{f.Topic, f.Partition}], fc)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	advance := map[partitionKey]bool{}
	for f, fc := range checks {
		p := partitionKey{f.Topic, f.Partition}
		switch err := fc.verdict(f, exclusive[p]); {
		case errors.Is(err, errAdvance):
			advance[p] = true
		case err != nil:
			for i, w := range ws {
				if w.f == f {
					res[i] = err
				}
			}
		}
	}
	if len(advance) > 0 {
		for p := range exclusive {
			advance[p] = true
		}
		return advanceError{advance}
	}
	return nil
}

// insertApplied inserts the applied row of each write whose fence passed
// (res[i] nil), in one round trip; fresh[i] says the row is new, so the
// write's effect is still to be made.
func (s *Sink) insertApplied(ctx context.Context, tx pgx.Tx, ws []write, res []error) (fresh []bool, err error) {
	fresh = make([]bool, len(ws))
	b := &pgx.Batch{}
	for i, w := range ws {
		if res[i] != nil {
			continue
		}
		b.Queue("INSERT INTO "+s.applied+" (topic, kafka_partition, kafka_offset, token) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
			w.f.Topic, w.f.Partition, w.offset, w.f.Token).Exec(func(ct pgconn.CommandTag) error {
			fresh[i] = ct.RowsAffected() == 1
			return nil
		})
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
	}
	return fresh, nil
}
