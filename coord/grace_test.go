package coord

import (
	"testing"
	"time"

	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/ledger"
)

// TestFailoverGrace: a gone owner's range stays put until FailoverGrace has
// passed since the leader first saw it gone, then fails over; an owner that
// comes back is forgotten.
func TestFailoverGrace(t *testing.T) {
	schema := keys.New("/keyshare", "g")
	tp := TopicPartition{Topic: "t", Partition: 0}
	r := RangeState{Key: schema.Range("t", 0, 0), Rev: 5, LedgerKey: schema.LedgerEntry("t", 0, 0), EntryRev: 6,
		Record: RangeRecord{Topic: "t", Partition: 0, Lo: 0, Hi: ledger.HashSpace, Owner: "a", State: StateActive}}
	snap := &Snapshot{Members: map[string]Member{"b": {}}, Ranges: []RangeState{r}}
	want := []Slice{{TopicPartition: tp, Range: ledger.HashRange{Lo: 0, Hi: ledger.HashSpace}, Owner: "b"}}
	grace := time.Second
	t0 := time.Now()
	var g goneTracker
	for _, c := range []struct {
		after    time.Duration
		held     bool
		wait     time.Duration
		failOver bool
	}{
		{0, true, grace, false},
		{600 * time.Millisecond, true, 400 * time.Millisecond, false},
		{grace, false, 0, true},
	} {
		held, wait := g.held(snap, t0.Add(c.after), grace)
		if held["a"] != c.held || wait != c.wait {
			t.Errorf("after %s: held %v wait %s, want %v %s", c.after, held, wait, c.held, c.wait)
		}
		in := planInput{schema: schema, snap: snap, now: t0, drainTimeout: time.Minute, gen: 2, held: held}
		ch, ok := in.rangeChange(r, want)
		if ok != c.failOver {
			t.Errorf("after %s: change %v (%q), want %v", c.after, ok, ch.what, c.failOver)
		}
	}
	// With no grace the range fails over at once.
	if held, _ := (&goneTracker{}).held(snap, t0, 0); held["a"] {
		t.Error("held with FailoverGrace 0")
	}
	// The owner comes back: forgotten, and a later loss waits a full grace.
	snap.Members["a"] = Member{}
	g.held(snap, t0.Add(2*grace), grace)
	delete(snap.Members, "a")
	if held, wait := g.held(snap, t0.Add(3*grace), grace); !held["a"] || wait != grace {
		t.Errorf("owner lost again: held %v wait %s, want a full grace", held, wait)
	}
}
