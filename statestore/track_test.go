package statestore

import (
	"testing"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/ledger"
)

// TestDropUnheld: the state of a range the member no longer holds is
// dropped, that of a range it holds (or holds a wider range around) is
// kept, and so is a restore under way.
func TestDropUnheld(t *testing.T) {
	s := &Store{held: make(grants)}
	half := ledger.HashSpace / 2
	mk := func(lo, hi uint64, done bool) *grant {
		g := &grant{topic: "events", partition: 0, rng: ledger.HashRange{Lo: lo, Hi: hi}, token: 5}
		g.progress.done.Store(done)
		s.held[partitionKey{"events", 0}] = append(s.held[partitionKey{"events", 0}], g)
		return g
	}
	kept, gone, restoring := mk(0, half/2, true), mk(half, ledger.HashSpace, true), mk(half/2, half, false)
	other := &grant{topic: "events", partition: 1, rng: ledger.Full, token: 6}
	other.progress.done.Store(true)
	s.held[partitionKey{"events", 1}] = []*grant{other}

	s.dropUnheld([]consumer.RangeStatus{{Topic: "events", Partition: 0, Lo: 0, Hi: half}})
	list := s.held[partitionKey{"events", 0}]
	if len(list) != 2 || list[0] != kept || list[1] != restoring {
		t.Errorf("partition 0 keeps %d grants, want the held range's and the one restoring", len(list))
	}
	if !gone.given || kept.given {
		t.Errorf("given up: the unheld range %v, the held one %v; want true, false", gone.given, kept.given)
	}
	if _, ok := s.held[partitionKey{"events", 1}]; ok || !other.given {
		t.Errorf("partition 1, held no more, still has its grant")
	}
}
