package plan

import (
	"maps"
	"testing"
	"time"

	"github.com/keyshare/keyshare/schema"
)

// TestObserve: the leader records when it first saw each draining record
// (revoking, or active with an owner that drains unasked), keeps that time
// while the record is unchanged, and forgets records that changed, stopped
// draining or are gone.
func TestObserve(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	t1 := t0.Add(time.Second)
	// Two members, m00 owning the first range and m01 the second.
	base := evenSnapshot(2)
	r0, r1 := base.Ranges[0], base.Ranges[1]
	obs := func(r schema.RangeState) RangeObs { return RangeObs{r.Key, r.Rev} }

	tests := []struct {
		name   string
		change func(snap *schema.Snapshot)
		before map[RangeObs]time.Time
		want   map[RangeObs]time.Time
	}{
		{"nothing draining", func(*schema.Snapshot) {}, nil, map[RangeObs]time.Time{}},
		{"revoking range first seen now", func(s *schema.Snapshot) { s.Ranges[0].Record.State = schema.StateRevoking },
			nil, map[RangeObs]time.Time{obs(r0): t1}},
		{"revoking range seen before keeps its time", func(s *schema.Snapshot) { s.Ranges[0].Record.State = schema.StateRevoking },
			map[RangeObs]time.Time{obs(r0): t0}, map[RangeObs]time.Time{obs(r0): t0}},
		{"revoking range of a gone owner", func(s *schema.Snapshot) {
			s.Ranges[0].Record.State = schema.StateRevoking
			delete(s.Members, "m00")
		}, nil, map[RangeObs]time.Time{obs(r0): t1}},
		{"active range of an owner draining unasked", func(s *schema.Snapshot) { leaving(s, "m01") },
			nil, map[RangeObs]time.Time{obs(r1): t1}},
		{"active range of a leaving owner with no drain budget", func(s *schema.Snapshot) {
			m := s.Members["m01"]
			m.Leaving = true
			s.Members["m01"] = m
		}, nil, map[RangeObs]time.Time{}},
		{"rewritten record is a new one", func(s *schema.Snapshot) {
			s.Ranges[0].Record.State = schema.StateRevoking
			s.Ranges[0].Rev = 50
		}, map[RangeObs]time.Time{obs(r0): t0}, map[RangeObs]time.Time{{r0.Key, 50}: t1}},
		{"record no longer draining is forgotten", func(*schema.Snapshot) {},
			map[RangeObs]time.Time{obs(r0): t0}, map[RangeObs]time.Time{}},
		{"gone record is forgotten", func(s *schema.Snapshot) { s.Ranges = s.Ranges[1:] },
			map[RangeObs]time.Time{obs(r0): t0, {"/gone", 3}: t0}, map[RangeObs]time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := evenSnapshot(2)
			tt.change(snap)
			seen := maps.Clone(tt.before)
			if seen == nil {
				seen = map[RangeObs]time.Time{}
			}
			Observe(seen, snap, t1)
			if !maps.Equal(seen, tt.want) {
				t.Fatalf("seen %v, want %v", seen, tt.want)
			}
		})
	}
}
