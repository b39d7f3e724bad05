package admin

import (
	"errors"
	"strings"
	"testing"

	"github.com/keyshare/keyshare/schema"
)

// TestParkTopicOutsideGroup: a parking topic the group consumes is
// refused by name (its members would handle the parked copies as new
// records); any other is taken.
func TestParkTopicOutsideGroup(t *testing.T) {
	snap := &schema.Snapshot{Ranges: []schema.RangeState{
		{Key: "r1", Record: schema.RangeRecord{Topic: "orders"}},
		{Key: "r2", Record: schema.RangeRecord{Topic: "payments"}},
	}}
	err := parkTopicOutsideGroup(snap, "payments")
	if !errors.Is(err, ErrBadKeyQuery) || !strings.Contains(err.Error(), `parking topic "payments" is consumed by the group`) {
		t.Errorf("payments as the parking topic: got %v, want ErrBadKeyQuery naming it", err)
	}
	if err := parkTopicOutsideGroup(snap, "orders.keyshare-parked"); err != nil {
		t.Errorf("a topic the group does not consume: %v", err)
	}
}
