package statestore

import (
	"context"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
)

// BatchHandler returns h with the key state of its records, which h finds
// with KeyOf for each record. Records whose key has applied them already
// are left out of h's batch, and done. After h returns, the changes of the
// records whose result is nil are appended to the changelog together (a
// key's in offset order), and each record is done once its change is
// acknowledged. A record whose change could not be appended fails, and so
// do the later records of its key in the batch.
//
// A call's records are of one range (consumer.BatchHandler), so one
// restore, if any, precedes the whole call.
func (s *Store) BatchHandler(h consumer.BatchHandler) consumer.BatchHandler {
	return func(ctx context.Context, batch []*kafka.Message) []error {
		return s.handleBatch(ctx, batch, h)
	}
}

func (s *Store) handleBatch(ctx context.Context, batch []*kafka.Message, h consumer.BatchHandler) []error {
	if len(batch) == 0 {
		return nil
	}
	f, ok := consumer.FenceOf(ctx, batch[0])
	if !ok {
		return consumer.FailAll(len(batch), errNoRecordContext)
	}
	g, err := s.grantOf(ctx, f)
	if err != nil {
		return consumer.FailAll(len(batch), err)
	}
	defer g.calls.Done()
	run, at, keys, err := s.batchKeys(g, batch)
	if err != nil {
		s.giveUp(g) // its table cannot be read: its disk failed
		return consumer.FailAll(len(batch), err)
	}
	results := make([]error, len(batch))
	if len(run) == 0 {
		return results
	}
	res := h(context.WithValue(ctx, keyContext{}, keys), run)
	if res != nil && len(res) != len(run) {
		return consumer.FailAll(len(batch), fmt.Errorf("statestore: the BatchHandler returned %d results for a batch of %d records", len(res), len(run)))
	}
	for i, err := range res {
		results[at[i]] = err
	}
	s.appendBatch(ctx, g, run, at, keys, results)
	return results
}

// batchKeys returns the records of batch to run (those their key has not
// applied), their places in batch, and their Keys, each key's records
// sharing its state.
func (s *Store) batchKeys(g *grant, batch []*kafka.Message) (run []*kafka.Message, at []int, keys batchKeys, err error) {
	keys = make(batchKeys, len(batch))
	states := make(map[string]*keyState)
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, m := range batch {
		var k *Key
		if m.Key == nil {
			k = &Key{msg: m, state: &keyState{}}
		} else {
			var skip bool
			if k, skip, err = s.keyFor(g, m, states[string(m.Key)]); err != nil {
				return nil, nil, nil, err
			} else if skip {
				continue
			}
			states[string(m.Key)] = k.state
		}
		keys[m] = k
		run = append(run, m)
		at = append(at, i)
	}
	return run, at, keys, nil
}

// appendBatch appends the changes of run's records whose result is nil,
// all sent before any is waited for, and fails a record whose change is
// not acknowledged and the later records of its key.
func (s *Store) appendBatch(ctx context.Context, g *grant, run []*kafka.Message, at []int, keys batchKeys, results []error) {
	type sent struct {
		i int
		a *pendingAppend
	}
	var pending []sent
	failed := make(map[string]error) // keys whose change failed, with why
	for j, m := range run {
		i := at[j]
		if err, ok := failed[string(m.Key)]; ok && m.Key != nil {
			results[i] = fmt.Errorf("statestore: an earlier record of the key in the batch failed: %w", err)
			continue
		}
		if results[i] != nil {
			failed[string(m.Key)] = results[i]
			continue
		}
		k := keys[m]
		if !k.changed {
			continue
		}
		if err := ctx.Err(); err != nil {
			results[i] = err
			continue
		}
		a, err := s.change(g, k)
		if err != nil {
			results[i], failed[string(m.Key)] = err, err
			continue
		}
		pending = append(pending, sent{i, a})
	}
	for _, p := range pending {
		if err := s.acknowledged(ctx, g, p.a); err != nil {
			results[p.i] = err
		}
	}
}
