package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/cmd/internal/recordlog"
	"github.com/keyshare/keyshare/consumer"
)

// simulatedHandler is keyshare-bench member's handler without --deliver:
// it spends the simulated cost, fails at --fail-rate, stalls --stall's key
// once and writes each record it finishes to the record log (if any).
type simulatedHandler struct {
	member   string
	cost     costFunc
	failRate float64
	stallKey string
	stallFor time.Duration
	rec      *recordlog.Log // nil: no --record

	mu      sync.Mutex // guards rng
	rng     *rand.Rand
	stalled sync.Once
}

// errSimulated is an attempt that --fail-rate failed.
var errSimulated = errors.New("simulated failure (--fail-rate)")

// errEarlierFailed is the result of a record whose key failed earlier in
// the same batch: the member does not apply it (the consumer discards its
// result either way and runs it again after the failed record).
var errEarlierFailed = errors.New("not applied: an earlier record of its key failed in this batch")

// draw returns the cost of a call of n records and which of them fail.
func (h *simulatedHandler) draw(n int) (time.Duration, []bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := h.cost(h.rng, n)
	fail := make([]bool, n)
	for i := range fail {
		fail[i] = h.rng.Float64() < h.failRate
	}
	return d, fail
}

// stall adds --stall's duration to d the first time key comes.
func (h *simulatedHandler) stall(key []byte, d time.Duration) time.Duration {
	if h.stallKey != "" && string(key) == h.stallKey {
		h.stalled.Do(func() { d += h.stallFor })
	}
	return d
}

// handle is the consumer.Handler.
func (h *simulatedHandler) handle(ctx context.Context, m *kafka.Message) error {
	start := time.Now()
	d, fail := h.draw(1)
	if err := worksleep.Sleep(ctx, h.stall(m.Key, d)); err != nil {
		return err
	}
	if fail[0] {
		return errSimulated
	}
	if h.rec != nil {
		return h.rec.Write(h.member, m, start)
	}
	return nil
}

// handleBatch is the consumer.BatchHandler: one simulated call for the
// whole batch (--work), then each record fails with --fail-rate or is
// written to the record log. A key's records after its first failure in
// the batch are not applied, so the record log shows each key in order.
func (h *simulatedHandler) handleBatch(ctx context.Context, batch []*kafka.Message) []error {
	start := time.Now() // every record of the batch starts with the call
	d, fail := h.draw(len(batch))
	for _, m := range batch {
		d = h.stall(m.Key, d)
	}
	if err := worksleep.Sleep(ctx, d); err != nil {
		return consumer.FailAll(len(batch), err)
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
			res[i] = errSimulated
		case h.rec != nil:
			res[i] = h.rec.Write(h.member, m, start)
		}
		if res[i] != nil && m.Key != nil {
			failed[key] = true
		}
	}
	return res
}
