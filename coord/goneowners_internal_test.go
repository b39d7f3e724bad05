package coord

import (
	"slices"
	"testing"
	"time"

	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/schema/schematest"
)

// TestAssignRoundGoneOwners: a member whose registration ends is reported
// by the first round that sees it, with the count of its ranges not yet
// released, and not again by the rounds that wait out its failover grace;
// one that comes back and ends again is reported again.
func TestAssignRoundGoneOwners(t *testing.T) {
	r := testAssignRound()
	r.parts = t0Parts
	snap := schematest.Even(planSchema, 5)
	// m01 owns three ranges, one of them already released (nothing to
	// fail over); m03 owns one.
	snap.Ranges[2].Record.Owner = "m01"
	snap.Ranges[4].Record.Owner = "m01"
	snap.Ranges[4].Record.State = schema.StateReleased
	m03 := snap.Members["m03"]
	delete(snap.Members, "m01")
	delete(snap.Members, "m03")
	c0 := time.Now()
	for _, s := range []struct {
		name string
		at   time.Duration
		back bool // m03 registered again
		want []goneOwner
	}{
		{name: "first round after the loss", want: []goneOwner{{id: "m01", ranges: 2}, {id: "m03", ranges: 1}}},
		{name: "a round within the grace", at: time.Second},
		{name: "a round after the grace", at: 4 * time.Second},
		{name: "m03 back", at: 5 * time.Second, back: true},
		{name: "m03 gone again", at: 6 * time.Second, want: []goneOwner{{id: "m03", ranges: 1}}},
	} {
		if s.back {
			snap.Members["m03"] = m03
		} else {
			delete(snap.Members, "m03")
		}
		st := r.step(snap, c0.Add(s.at), 7, false, false)
		if !slices.Equal(st.gone, s.want) {
			t.Errorf("%s: gone %+v, want %+v", s.name, st.gone, s.want)
		}
	}
}
