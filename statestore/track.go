package statestore

import (
	"context"
	"time"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/ledger"
)

// trackInterval is how often Track compares the member's ranges with the
// Store's grants.
const trackInterval = 5 * time.Second

// Track drops, until ctx ends, the state of ranges member c no longer
// holds: a range handed to another member leaves its table behind
// otherwise, until a grant of an overlapping range replaces it. Run it
// beside c.Run (go store.Track(ctx, c)); without it a member's memory
// grows with every range it ever held.
func (s *Store) Track(ctx context.Context, c *consumer.Consumer) {
	t := time.NewTicker(trackInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.dropUnheld(c.Status().Ranges)
		}
	}
}

// dropUnheld gives up the grants whose range no range of held contains.
func (s *Store) dropUnheld(held []consumer.RangeStatus) {
	byTP := make(map[partitionKey][]ledger.HashRange)
	for _, r := range held {
		pk := partitionKey{r.Topic, r.Partition}
		byTP[pk] = append(byTP[pk], ledger.HashRange{Lo: r.Lo, Hi: r.Hi})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for pk, gs := range s.held {
		kept := gs[:0]
		for _, g := range gs {
			if !g.progress.done.Load() || containedIn(g.rng, byTP[pk]) {
				kept = append(kept, g) // a restore under way belongs to a record running now
				continue
			}
			s.retireLocked(g)
		}
		if len(kept) == 0 {
			delete(s.held, pk)
		} else {
			s.held[pk] = kept
		}
	}
}

func containedIn(r ledger.HashRange, rs []ledger.HashRange) bool {
	for _, o := range rs {
		if o.Intersect(r) == r {
			return true
		}
	}
	return false
}
