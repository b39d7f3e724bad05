package admin

import (
	"errors"
	"strings"
	"testing"

	"github.com/keyshare/keyshare/state"
)

// TestParkTopicOutsideGroup: a parking topic the group consumes is
// refused by name (its members would handle the parked copies as new
// records); any other is taken.
func TestParkTopicOutsideGroup(t *testing.T) {
	snap := &state.Snapshot{Ranges: []state.RangeState{
		{Key: "r1", Record: state.RangeRecord{Topic: "orders"}},
		{Key: "r2", Record: state.RangeRecord{Topic: "payments"}},
	}}
	err := parkTopicOutsideGroup(snap, "payments")
	if !errors.Is(err, ErrBadKeyQuery) || !strings.Contains(err.Error(), `parking topic "payments" is consumed by the group`) {
		t.Errorf("payments as the parking topic: got %v, want ErrBadKeyQuery naming it", err)
	}
	if err := parkTopicOutsideGroup(snap, "orders.keyshare-parked"); err != nil {
		t.Errorf("a topic the group does not consume: %v", err)
	}
}
