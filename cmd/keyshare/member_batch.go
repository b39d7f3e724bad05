package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/consumer"
)

// costFunc is the simulated cost of one handler call of n records.
type costFunc func(r *rand.Rand, n int) time.Duration

// parseCost reads --work: call:FIXED+PER_RECORD is a fixed cost per handler
// call plus a cost per record in it (a sink that pays per call, such as a
// database transaction or a bulk API); any other spec is a per-record
// distribution (parseWork), summed over the records of a call.
func parseCost(spec string) (costFunc, error) {
	if arg, ok := strings.CutPrefix(spec, "call:"); ok {
		bad := fmt.Errorf("--work %q: want call:FIXED+PER_RECORD, e.g. call:5ms+0.05ms", spec)
		fixed, per, ok := strings.Cut(arg, "+")
		if !ok {
			return nil, bad
		}
		f, err1 := time.ParseDuration(fixed)
		p, err2 := time.ParseDuration(per)
		if err1 != nil || err2 != nil || f < 0 || p < 0 {
			return nil, bad
		}
		return func(_ *rand.Rand, n int) time.Duration { return f + time.Duration(n)*p }, nil
	}
	work, err := parseWork(spec)
	if err != nil {
		return nil, err
	}
	return func(r *rand.Rand, n int) time.Duration {
		var d time.Duration
		for range n {
			d += work(r)
		}
		return d
	}, nil
}

func (c *memberCommand) checkBatchFlags() error {
	switch {
	case c.batchSize < 0:
		return fmt.Errorf("--batch-size %d: want 0 (one record per call) or a batch size of at least 1", c.batchSize)
	case c.batchSize > c.cfg.MaxInFlight:
		return fmt.Errorf("--batch-size %d exceeds --max-in-flight %d: a batch could never fill; lower --batch-size or raise --max-in-flight", c.batchSize, c.cfg.MaxInFlight)
	case c.batchWait < 0:
		return fmt.Errorf("--batch-wait %s: want a duration of 0 or more", c.batchWait)
	}
	return nil
}

// errEarlierFailed is the result of a record whose key failed earlier in
// the same batch: the member does not apply it (the consumer discards its
// result either way and runs it again after the failed record).
var errEarlierFailed = errors.New("not applied: an earlier record of its key failed in this batch")

// batchHandler is the member's BatchHandler: one simulated call for the
// whole batch (--work), then each record fails with --fail-rate or is
// written to the record log. A key's records after its first failure in
// the batch are not applied, so the record log shows each key in order.
func (c *memberCommand) batchHandler(cost costFunc, mu *sync.Mutex, rng *rand.Rand, stallKey string, stallFor time.Duration,
	stalled *sync.Once, rec *recordLog, id func() string) consumer.BatchHandler {
	return func(ctx context.Context, batch []*kafka.Message) []error {
		start := time.Now() // every record of the batch starts with the call
		mu.Lock()
		d := cost(rng, len(batch))
		fail := make([]bool, len(batch))
		for i := range fail {
			fail[i] = rng.Float64() < c.failRate
		}
		mu.Unlock()
		if stallKey != "" {
			for _, m := range batch {
				if string(m.Key) == stallKey {
					stalled.Do(func() { d += stallFor })
				}
			}
		}
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return consumer.FailAll(len(batch), ctx.Err())
			}
		}
		res := make([]error, len(batch))
		failed := make(map[string]bool)
		for i, m := range batch {
			key := string(m.Key)
			blocked := m.Key != nil && failed[key] // a null key has no order to keep
			switch {
			case blocked:
				res[i] = errEarlierFailed
			case fail[i]:
				res[i] = errors.New("simulated failure (--fail-rate)")
			case rec != nil:
				res[i] = rec.write(id(), m, start)
			}
			if res[i] != nil && m.Key != nil {
				failed[key] = true
			}
		}
		return res
	}
}
