package pgsink

import (
	"context"

	"github.com/keyshare/keyshare/consumer"
)

// SkipFenceCheck turns s's fence check off: the tests that show what the
// check prevents run the same scenario without it.
func SkipFenceCheck(s *Sink) { s.unfenced = true }

// ApplyBatch applies records under the given fences and offsets in one of
// s's batch transactions, as its BatchHandler does.
func ApplyBatch(s *Sink, ctx context.Context, fences []consumer.Fence, offsets []int64, effects []Effect) []error {
	ws := make([]write, len(fences))
	for i := range fences {
		ws[i] = write{f: fences[i], offset: offsets[i], effect: effects[i]}
	}
	return s.applyBatch(ctx, ws)
}
