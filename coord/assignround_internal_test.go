package coord

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/schema/schematest"
)

// testAssignRound is a round with a session TTL of 1 s (so the group must
// be still for 1 s before defragmenting) and a failover grace of 3 s.
func testAssignRound() *assignRound {
	cfg := DefaultConfig()
	cfg.SessionTTL = time.Second
	cfg.FailoverGrace = 3 * time.Second
	cfg.DrainTimeout = time.Second
	return newAssignRound(cfg, planSchema, newLoadBalancer(cfg, hclog.NewNullLogger(), &loadCounter{}))
}

var t0Parts = []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}

// readOf is a partition read at at of t/0, missing the given topics.
func readOf(at time.Time, missing ...string) topicRead {
	return topicRead{at: at, parts: t0Parts, missing: missing, ids: map[string]string{}}
}

func TestAssignRoundDebounce(t *testing.T) {
	r := testAssignRound()
	for i, c := range []struct {
		rev  int64
		wait bool
	}{{5, true}, {5, false}, {5, false}, {6, true}, {6, false}} {
		if got := r.debounce(c.rev); got != c.wait {
			t.Errorf("trigger %d at member revision %d: debounce %v, want %v", i, c.rev, got, c.wait)
		}
	}
}

func TestAssignRoundTakeRead(t *testing.T) {
	r := testAssignRound()
	at := time.Now()
	steps := []struct {
		name  string
		read  topicRead
		held  bool // a topic reset under way
		want  topicStep
		parts int
	}{
		{name: "no read yet: the round waits", read: topicRead{}, want: topicStep{}},
		{name: "a first read with a topic missing", read: readOf(at, "x"), want: topicStep{ready: true, check: true, missing: "x", missingChanged: true}, parts: 1},
		{name: "the same read again: nothing to check or report", read: readOf(at, "x"), want: topicStep{ready: true}, parts: 1},
		{name: "the same read during a topic reset: checked every round", read: readOf(at, "x"), held: true, want: topicStep{ready: true, check: true}, parts: 1},
		{name: "a new read, the same topic missing: checked, not reported again", read: readOf(at.Add(time.Second), "x"), want: topicStep{ready: true, check: true}, parts: 1},
		{name: "a new read with every topic: reported", read: readOf(at.Add(2 * time.Second)), want: topicStep{ready: true, check: true, missingChanged: true}, parts: 1},
	}
	for _, s := range steps {
		if s.held {
			r.topics.held["t"] = true
		} else {
			clear(r.topics.held)
		}
		if got := r.takeRead(s.read); got != s.want {
			t.Errorf("%s: %+v, want %+v", s.name, got, s.want)
		}
		if len(r.parts) != s.parts {
			t.Errorf("%s: %d partitions held, want %d", s.name, len(r.parts), s.parts)
		}
	}
}

// TestAssignRoundQuiet: a round that plans nothing with nothing waiting on
// a clock makes the next rounds at the same assignment revision and
// partition read quiet; a new revision, read or topic change ends that.
func TestAssignRoundQuiet(t *testing.T) {
	r := testAssignRound()
	c0 := time.Now()
	r.takeRead(readOf(c0))
	snap := schematest.Even(planSchema, 2)

	st := r.step(snap, c0, 7, false, r.quiet(7))
	if len(st.changes) != 0 || !slices.Equal(st.wake, []time.Duration{time.Second}) {
		t.Fatalf("first round: %d changes, wake %v; want none, and a wake when the group has been still for 1s", len(st.changes), st.wake)
	}
	if r.quiet(7) {
		t.Fatal("quiet while the stillness defragmentation waits for is not over")
	}
	st = r.step(snap, c0.Add(time.Second), 7, false, r.quiet(7))
	if len(st.changes) != 0 || len(st.wake) != 0 {
		t.Fatalf("still round: %d changes, wake %v; want none", len(st.changes), st.wake)
	}
	if !r.quiet(7) {
		t.Fatal("not quiet after a round that planned nothing with nothing waiting")
	}
	if r.quiet(8) {
		t.Fatal("quiet at a new assignment revision")
	}
	r.takeRead(readOf(c0.Add(time.Minute)))
	if r.quiet(7) {
		t.Fatal("quiet after a new partition read")
	}
	r.step(snap, c0.Add(2*time.Second), 7, false, false)
	r.topics.changed = true
	if r.quiet(7) {
		t.Fatal("quiet after the held topics changed")
	}
	// The round that plans after the change takes it in.
	r.step(snap, c0.Add(3*time.Second), 7, false, false)
	if !r.quiet(7) {
		t.Fatal("not quiet after a round planned nothing since the topics changed")
	}
}

// TestAssignRoundFailoverGrace: a gone owner's range is held for
// FailoverGrace, the round wakes when it ends, then hands the range on.
func TestAssignRoundFailoverGrace(t *testing.T) {
	r := testAssignRound()
	c0 := time.Now()
	r.takeRead(readOf(c0))
	snap := schematest.Even(planSchema, 2)
	r.step(snap, c0, 7, false, false)
	r.step(snap, c0.Add(time.Second), 7, false, false) // still: quiet

	gone := schematest.Even(planSchema, 2)
	delete(gone.Members, "m01")
	st := r.step(gone, c0.Add(2*time.Second), 8, false, false)
	if len(st.changes) != 0 || !slices.Contains(st.wake, 3*time.Second) {
		t.Fatalf("owner just gone: %d changes, wake %v; want none, and a wake in 3s", len(st.changes), st.wake)
	}
	if r.quiet(8) {
		t.Fatal("quiet while a range is held for its gone owner")
	}
	st = r.step(gone, c0.Add(4*time.Second), 8, false, false)
	if len(st.changes) != 0 || !slices.Contains(st.wake, time.Second) {
		t.Fatalf("1s before the grace ends: %d changes, wake %v; want none, and a wake in 1s", len(st.changes), st.wake)
	}
	if r.quiet(8) {
		t.Fatal("quiet while a range is held for its gone owner, the group still")
	}
	if st := r.step(gone, c0.Add(5*time.Second), 8, false, false); len(st.changes) == 0 {
		t.Fatal("grace over: no change; want the range handed on")
	}
}

// TestAssignRoundRevokingNotQuiet: a revoking range waits on its drain
// clock, so a round that plans nothing while it drains is not quiet.
func TestAssignRoundRevokingNotQuiet(t *testing.T) {
	r := testAssignRound()
	c0 := time.Now()
	r.takeRead(readOf(c0))
	snap := schematest.Even(planSchema, 2)
	m := snap.Members["m01"]
	m.Leaving = true // so m00 is the range's wanted owner
	snap.Members["m01"] = m
	snap.Ranges[1].Record.State = schema.StateRevoking
	snap.Ranges[1].Record.Target = "m00"
	snap.Ranges[1].Record.DrainMs = 5000
	r.step(snap, c0, 7, false, false) // the group still from here, the revoke seen
	st := r.step(snap, c0.Add(time.Second), 7, false, false)
	if len(st.changes) != 0 {
		t.Fatalf("%d changes while the range drains, want none: %s", len(st.changes), st.changes[0].What)
	}
	if len(r.seen) != 1 || r.quiet(7) {
		t.Fatalf("revoking ranges seen %d, quiet %v; want 1 and not quiet", len(r.seen), r.quiet(7))
	}
	// Drain budget (5s) and grace (max(1s, SessionTTL)) over, on the
	// leader's clock from when it first saw the revoke: handed on.
	if st := r.step(snap, c0.Add(5900*time.Millisecond), 7, false, false); len(st.changes) != 0 {
		t.Fatal("handed on before the drain and its grace were over")
	}
	if st := r.step(snap, c0.Add(6*time.Second+time.Millisecond), 7, false, false); len(st.changes) == 0 {
		t.Fatal("no change once the drain and its grace are over")
	}
}

// TestAssignRoundSettle: defragmentation waits until the group has been
// still for max(1s, SessionTTL); a change of members starts the wait again.
func TestAssignRoundSettle(t *testing.T) {
	r := testAssignRound()
	c0 := time.Now()
	r.takeRead(readOf(c0))
	// m00 owns two adjacent ranges: merging them is defragmentation.
	snap := schematest.Even(planSchema, 3)
	snap.Ranges[1].Record.Owner = "m00"
	delete(snap.Members, "m01")
	delete(snap.Members, "m02")
	snap.Ranges[2].Record.Owner = "m00"
	for i, step := range []struct {
		at     time.Duration
		merges bool
		wake   time.Duration
	}{{0, false, time.Second}, {500 * time.Millisecond, false, 500 * time.Millisecond}, {time.Second, true, 0}} {
		st := r.step(snap, c0.Add(step.at), 7, false, false)
		merged := slices.ContainsFunc(st.changes, func(c plan.Change) bool { return c.Defrag })
		if merged != step.merges || step.wake > 0 && !slices.Contains(st.wake, step.wake) || step.wake == 0 && len(st.wake) > 0 {
			t.Fatalf("step %d at +%s: merges %v, wake %v; want merges %v, wake %v", i, step.at, merged, st.wake, step.merges, step.wake)
		}
	}
}

// TestAssignRoundJudgeQuiet: the load timer on a quiet group plans only if
// load moves something; with no load balance, nothing.
func TestAssignRoundJudgeQuiet(t *testing.T) {
	r := testAssignRound()
	r.takeRead(readOf(time.Now()))
	snap := schematest.Even(planSchema, 2)
	snap.Ranges = nil // a plan would assign the partition
	if st := r.step(snap, time.Now(), 7, true, true); len(st.changes) != 0 {
		t.Fatalf("quiet round judging load: %d changes, want none", len(st.changes))
	}
	if st := r.step(snap, time.Now(), 7, true, false); len(st.changes) == 0 {
		t.Fatal("a round that is not quiet planned nothing for an unassigned partition")
	}
}

// TestAssignRoundLargePlan: a plan of more than maxChangesPerRound
// changes is written over several rounds: this one writes the first
// maxChangesPerRound and asks for the next at once.
func TestAssignRoundLargePlan(t *testing.T) {
	r := testAssignRound()
	parts := make([]assign.PartitionWeight, maxChangesPerRound+100)
	for i := range parts {
		parts[i] = assign.PartitionWeight{TopicPartition: assign.TopicPartition{Topic: "t", Partition: int32(i)}}
	}
	r.takeRead(topicRead{at: time.Now(), parts: parts})
	snap := schematest.Even(planSchema, 2)
	snap.Ranges = nil
	st := r.step(snap, time.Now(), 7, false, false)
	if !st.more || len(st.changes) != maxChangesPerRound || st.planned <= maxChangesPerRound {
		t.Fatalf("more %v, %d changes of %d planned; want more, %d of over %d", st.more, len(st.changes), st.planned, maxChangesPerRound, maxChangesPerRound)
	}
	small := testAssignRound()
	small.takeRead(readOf(time.Now()))
	if st := small.step(snap, time.Now(), 7, false, false); st.more || st.planned != len(st.changes) || st.planned == 0 {
		t.Fatalf("one partition: more %v, %d changes of %d planned; want all in this round", st.more, len(st.changes), st.planned)
	}
}

// TestAssignRoundProblems: damaged values are reported once per change.
func TestAssignRoundProblems(t *testing.T) {
	r := testAssignRound()
	r.takeRead(readOf(time.Now()))
	snap := schematest.Even(planSchema, 2)
	snap.Problems = []error{errors.New("a"), errors.New("b")}
	for i, want := range []string{"a; b", ""} {
		if st := r.step(snap, time.Now(), 7, false, false); st.problems != want {
			t.Errorf("round %d: problems %q, want %q", i, st.problems, want)
		}
	}
	snap.Problems = nil
	r.step(snap, time.Now(), 7, false, false)
	snap.Problems = []error{fmt.Errorf("a")}
	if st := r.step(snap, time.Now(), 7, false, false); st.problems != "a" {
		t.Errorf("after they cleared: problems %q, want %q", st.problems, "a")
	}
}
