package plan

import (
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// TestFailoverGrace: a range whose owner is gone stays put until
// FailoverGrace has passed since the leader first saw it so, then fails
// over; an owner that comes back is forgotten. A range of an earlier
// registration under an id that registered again is gone too, and waits
// from when the leader first saw its owner gone, not from the new
// registration.
func TestFailoverGrace(t *testing.T) {
	keys := schema.Group{Prefix: "/keyshare", Name: "g"}.Keys()
	tp := assign.TopicPartition{Topic: "t", Partition: 0}
	r := schema.RangeState{Key: keys.Range("t", 0, 0), Rev: 5, LedgerKey: keys.LedgerEntry("t", 0, 0), EntryRev: 6,
		Record: schema.RangeRecord{Topic: "t", Partition: 0, Lo: 0, Hi: ledger.HashSpace, Owner: "a", State: schema.StateActive}}
	obs := RangeObs{r.Key, r.Rev}
	snap := &schema.Snapshot{Members: map[string]schema.Member{"b": {}}, Ranges: []schema.RangeState{r}}
	want := []assign.Slice{{TopicPartition: tp, Range: ledger.HashRange{Lo: 0, Hi: ledger.HashSpace}, Owner: "b"}}
	grace := time.Second
	t0 := time.Now()
	var g GoneTracker
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
		held, wait := g.Held(snap, t0.Add(c.after), grace)
		if held[obs] != c.held || wait != c.wait {
			t.Errorf("after %s: held %v wait %s, want %v %s", c.after, held, wait, c.held, c.wait)
		}
		in := Input{Schema: keys, Snap: snap, Now: t0, DrainTimeout: time.Minute, Gen: 2, Held: held}
		ch, ok := in.rangeChange(r, want)
		if ok != c.failOver {
			t.Errorf("after %s: change %v (%q), want %v", c.after, ok, ch.What, c.failOver)
		}
	}
	// With no grace the range fails over at once.
	if held, _ := (&GoneTracker{}).Held(snap, t0, 0); held[obs] {
		t.Error("held with FailoverGrace 0")
	}
	// The owner comes back: forgotten, and a later loss waits a full grace.
	snap.Members["a"] = schema.Member{CreateRev: 1}
	g.Held(snap, t0.Add(2*grace), grace)
	delete(snap.Members, "a")
	if held, wait := g.Held(snap, t0.Add(3*grace), grace); !held[obs] || wait != grace {
		t.Errorf("owner lost again: held %v wait %s, want a full grace", held, wait)
	}
	// a registers again (revision 9, after the record's 5) before the
	// grace is over: the range still belongs to the registration that
	// went. It waits out the grace counted from the loss, then fails
	// over, to a again if the assignor keeps it there.
	snap.Members["a"] = schema.Member{CreateRev: 9}
	if held, wait := g.Held(snap, t0.Add(3*grace+300*time.Millisecond), grace); !held[obs] || wait != 700*time.Millisecond {
		t.Errorf("after a registered again: held %v wait %s, want the range held 700ms more", held, wait)
	}
	if owned := snap.Owned("a"); len(owned) != 0 {
		t.Errorf("a's new registration owns %d ranges of the old one", len(owned))
	}
	keep := []assign.Slice{{TopicPartition: tp, Range: ledger.HashRange{Lo: 0, Hi: ledger.HashSpace}, Owner: "a"}}
	held, _ := g.Held(snap, t0.Add(4*grace), grace)
	in := Input{Schema: keys, Snap: snap, Now: t0, DrainTimeout: time.Minute, Gen: 2, Held: held}
	if ch, ok := in.rangeChange(r, keep); !ok || !strings.HasPrefix(ch.What, "fail over") {
		t.Errorf("the old registration's range after the grace: change %v (%q), want a fail over to a's new registration", ok, ch.What)
	}
}
