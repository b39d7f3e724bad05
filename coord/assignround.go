package coord

import (
	"strings"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/schema"
)

// assignRound is what the leader's assignment rounds remember between
// rounds, and their decisions: whether a round waits, what it plans, when
// the next one must run. It does no I/O; assignLoop (leader.go) waits,
// debounces, reads and writes around it.
type assignRound struct {
	cfg     Config
	schema  schema.Keys
	balance *loadBalancer

	parts    []assign.PartitionWeight
	partsAt  time.Time // when parts was read: a new read is a reason to plan
	missing  string    // topics the last read could not count, joined
	problems string    // the snapshot's damaged values last reported, joined
	// seen is when this leader first saw each revoking record, on its
	// own clock: a new leader starts counting drains again.
	seen map[plan.RangeObs]time.Time
	// topics is the topics deleted and created again (topics.go).
	topics *topicWatch
	gone   plan.GoneTracker   // FailoverGrace (grace.go)
	told   goneOwners         // members already reported gone (goneowners.go)
	settle plan.SettleTracker // defragmentation waits for a still group (settle.go)
	// quietRev and quietPartsAt are the assignment revision and partition
	// read of the last round that planned nothing with no range revoking:
	// until either changes, a round would plan nothing again, so it is
	// skipped (at P = 4,096 a plan costs about 10 ms of CPU). Ledger
	// damage, which the plan also repairs, is looked at again at least
	// every PartitionRefresh, when the partitions are reread.
	quietRev     int64
	quietPartsAt time.Time
	// membersAt is the member revision the last debounce waited for.
	membersAt int64
}

func newAssignRound(cfg Config, keys schema.Keys, balance *loadBalancer) *assignRound {
	return &assignRound{cfg: cfg, schema: keys, balance: balance, seen: make(map[plan.RangeObs]time.Time), topics: newTopicWatch(), quietRev: -1, membersAt: -1}
}

// debounce reports whether a trigger at member revision m waits
// Config.RebalanceDebounce first: only when the members changed since the last
// wait. Range changes alone (releases, this leader's own writes) and a
// member turning Leaving are planned at once: a leave at P = 4,096
// releases its ranges over many transactions, and each debounce would
// delay their handoff.
func (r *assignRound) debounce(m int64) bool {
	if m == r.membersAt {
		return false
	}
	r.membersAt = m
	return true
}

// topicStep is what a round does with the latest partition read.
type topicStep struct {
	ready bool // partition counts known: the round may go on
	// check: compare Kafka's topic ids with the topic records now
	// (Session.checkTopics), for a new read or a reset under way.
	check bool
	// missing is the topics without a count, joined, when that set
	// changed (report it); missingChanged says whether it did.
	missing        string
	missingChanged bool
}

// takeRead takes the latest partition read.
func (r *assignRound) takeRead(read topicRead) topicStep {
	if read.at.IsZero() {
		return topicStep{} // no partition counts yet: the reader pokes with the first
	}
	if read.at.Equal(r.partsAt) {
		return topicStep{ready: true, check: len(r.topics.held) > 0} // a reset under way: every round
	}
	r.parts, r.partsAt = read.parts, read.at
	st := topicStep{ready: true, check: true}
	if m := strings.Join(read.missing, ","); m != r.missing {
		st.missing, st.missingChanged = m, true
		r.missing = m
	}
	return st
}

// quiet reports that a round at assignment revision assignRev would plan
// nothing again: nothing changed since the last round that planned nothing
// and nothing waits on a clock. A quiet round runs only to judge load, and
// plans only if that moves something.
func (r *assignRound) quiet(assignRev int64) bool {
	return assignRev == r.quietRev && r.partsAt.Equal(r.quietPartsAt) && !r.topics.changed
}

// assignStep is one round's decisions.
type assignStep struct {
	changes []plan.Change // to write, at most maxChangesPerRound
	// planned is how many changes the plan found; more, that they are
	// more than one round writes: run the next round at once for the
	// rest.
	planned int
	more    bool
	// wake is when rounds must run again however quiet the group is:
	// a failover grace or the stillness defragmentation waits for ends.
	wake []time.Duration
	// problems is the snapshot's damaged values, joined, when they
	// changed to something to report.
	problems string
	// gone is the members newly seen gone with ranges to fail over:
	// each registration is reported once.
	gone []goneOwner
}

// step plans one round on snap at clock (the leader's monotonic now),
// for the assignment revision assignRev; judgeLoad: the load timer fired,
// and quiet is what quiet(assignRev) said.
func (r *assignRound) step(snap *schema.Snapshot, clock time.Time, assignRev int64, judgeLoad, quiet bool) assignStep {
	var st assignStep
	if p := joinErrors(snap.Problems); p != r.problems {
		st.problems = p
		r.problems = p
	}
	plan.Observe(r.seen, snap, clock)
	st.gone = r.told.news(snap)
	held, wait := r.gone.Held(snap, clock, r.cfg.FailoverGrace)
	if wait > 0 {
		st.wake = append(st.wake, wait)
	}
	assignable := r.topics.assignable(r.parts)
	defrag, still := r.settle.Ready(snap, assignable, clock, plan.SettleDelay(r.cfg.SessionTTL))
	if still > 0 {
		st.wake = append(st.wake, still)
	}
	var eligible []assign.MemberWeight
	for _, m := range snap.Members {
		if !m.Leaving {
			eligible = append(eligible, assign.MemberWeight{ID: m.ID, Weight: m.Weight})
		}
	}
	target := r.balance.wanted(snap, assignable, eligible)
	if judgeLoad {
		if t := r.balance.judge(snap, assignable, eligible, defrag, clock); t != nil {
			target = t
		} else if quiet {
			return st
		}
	}
	changes := plan.Plan(plan.Input{
		Schema: r.schema, Snap: snap, Parts: assignable, Now: clock.UTC(),
		DrainTimeout: r.cfg.DrainTimeout, Gen: snap.Generation.Generation + 1,
		MaxTxnOps: r.cfg.MaxTxnOps,
		Clock:     clock, Seen: r.seen, Grace: drainGrace(r.cfg.SessionTTL), Held: held,
		Defrag: defrag, Target: target, CoPartitioned: r.cfg.CoPartitioned,
	})
	r.settle.Moved(changes, clock)
	r.balance.rested(snap, len(changes), clock)
	r.topics.changed = false
	if len(changes) == 0 {
		// Quiet only if nothing waits on a clock: a revoke's drain,
		// a gone owner's FailoverGrace, a recreated topic's reset,
		// the stillness defragmentation waits for.
		if len(r.seen) == 0 && len(held) == 0 && len(r.topics.held) == 0 && still == 0 {
			r.quietRev, r.quietPartsAt = assignRev, r.partsAt
		}
		return st
	}
	r.quietRev = -1
	st.planned = len(changes)
	if len(changes) > maxChangesPerRound {
		// A partition count change of thousands at once, or a first
		// assignment of a large group: write it in bounded rounds.
		changes, st.more = changes[:maxChangesPerRound], true
	}
	st.changes = changes
	return st
}
