package plan

import (
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// TestSettleTracker: defragmentation waits until the members and partitions
// have stayed the same, and no round has moved hash space, for the delay.
func TestSettleTracker(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	t0 := time.Now()
	snap := evenSnapshot(2)
	parts := []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}
	var s SettleTracker
	step := func(at time.Duration, wantReady bool, wantWait time.Duration) {
		t.Helper()
		ready, wait := s.Ready(snap, parts, t0.Add(at), delay)
		if ready != wantReady || wait != wantWait {
			t.Fatalf("at %s: ready %v wait %s, want %v %s", at, ready, wait, wantReady, wantWait)
		}
	}
	step(0, false, delay) // a new leader counts from its start
	step(time.Second, false, time.Second)
	step(delay, true, 0)
	// A member joins: wait again.
	snap.Members["new"] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: "new", Weight: 1}}
	step(3*time.Second, false, delay)
	step(5*time.Second, true, 0)
	// A leaving flag is a change too.
	m := snap.Members["new"]
	m.Leaving = true
	snap.Members["new"] = m
	step(6*time.Second, false, delay)
	// A round that moved hash space restarts the wait; one that only
	// merged does not.
	s.Moved([]Change{{Defrag: true}}, t0.Add(8*time.Second))
	step(8*time.Second, true, 0)
	s.Moved([]Change{{Defrag: true}, {What: "hand off"}}, t0.Add(9*time.Second))
	step(10*time.Second, false, time.Second)
	step(11*time.Second, true, 0)
}
