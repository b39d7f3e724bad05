package coord

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// The leader's side of load balance: which reports it trusts, when it
// judges them, and the layout it holds to once it has moved by load.
//
// The leader judges load on its own timer (every LoadReportInterval), not on
// every report, and only when
//
//   - Config.Balance is BalanceLoad;
//   - the group is still (settle.go: same members and partitions, no move,
//     for a session TTL) and at rest (every range active, the last round
//     planned nothing);
//   - the reports describe the current ranges: every current range is in
//     a report that arrived after the group came to rest (an owner that
//     never reports, or leaves a range out, holds load balance back; it
//     never has its ranges guessed);
//   - LoadCooldown has passed since the last load-driven move;
//
// and it moves only when assign.BalanceByLoad predicts a gain of LoadMinGain (or
// to tidy a fragmented load layout). The layout it moved to (the target)
// replaces Assign's answer in the plan for as long as the members and
// partitions stay the same, so neither the width assignor nor the
// contiguous layout undoes it. A change of members
// or partitions on it is placed by load, moving the least load
// (assign.StickyByLoad), and the fragments that leaves are tidied into one span
// per member once the group is still (judge); with whole partitions, or
// no trusted report, the change is placed by width as before. A new leader
// takes a settled layout as it finds it for its target (adoptable), so a
// failover does not undo load placement.

// arrivedKV is a load key as the cache holds it.
type arrivedKV struct {
	kv *mvccpb.KeyValue
	at time.Time
}

// decodedLoad memoizes a load key's decoding by ModRevision.
type decodedLoad struct {
	rev    int64
	report schema.LoadReport
	err    error
}

// decodeLoads decodes the load keys the cache holds: the reports of
// registered members, and the problems of the others by the member id in
// their key. Keys whose revision did not change are not decoded again.
func decodeLoads(s schema.Keys, kvs map[string]arrivedKV, members map[string]schema.Member, memo map[string]decodedLoad) (map[string]schema.ReceivedLoad, map[string]error, map[string]decodedLoad) {
	loads := make(map[string]schema.ReceivedLoad)
	bad := make(map[string]error)
	next := make(map[string]decodedLoad, len(kvs))
	for key, a := range kvs {
		id := strings.TrimPrefix(key, s.Loads())
		d, ok := memo[key]
		if !ok || d.rev != a.kv.ModRevision {
			d = decodedLoad{rev: a.kv.ModRevision}
			d.report, d.err = schema.DecodeLoad(key, a.kv.Value)
			if d.err == nil && d.report.Member != id {
				d.err = &schema.BadValueError{Key: key, Problem: fmt.Sprintf("report of member %q under the key of %q", d.report.Member, id)}
			}
		}
		next[key] = d
		switch _, registered := members[id]; {
		case d.err != nil:
			bad[id] = d.err
		case !registered:
			bad[id] = &schema.BadValueError{Key: key, Problem: fmt.Sprintf("load report of %q, which is not a registered member", id)}
		default:
			loads[id] = schema.ReceivedLoad{Report: d.report, Rev: a.kv.ModRevision, Arrived: a.at}
		}
	}
	return loads, bad, next
}

// LoadMoves counts the load-driven moves a member made while it led.
type LoadMoves struct {
	// Moves is how many load-driven moves it started.
	Moves int
	// HashSpaceMoved is the sum over those moves of the share of the
	// group's hash space that changed owner (1 is all of it once).
	HashSpaceMoved float64
	// Before and After are the busiest member's load (busy worker-seconds
	// per second, per mean member weight) before the last move and as
	// predicted after it.
	Before, After float64
	// IgnoredReports counts the warnings about load reports the leader
	// ignored (one per member and kind of problem).
	IgnoredReports int
}

// loadCounter is a Session's LoadMoves, written by its leader.
type loadCounter struct {
	mu sync.Mutex
	m  LoadMoves
}

// LoadMoves returns the load-driven moves this member made as leader.
func (s *Session) LoadMoves() LoadMoves {
	s.loadMoves.mu.Lock()
	defer s.loadMoves.mu.Unlock()
	return s.loadMoves.m
}

// loadBalancer is the leader's load-balance state, owned by assignLoop.
type loadBalancer struct {
	cfg    Config
	log    hclog.Logger
	counts *loadCounter

	// target is the layout of the last load-driven move (or the settled
	// layout a new leader found), for the group shape it was made for.
	target      []assign.Slice
	targetShape string
	adoptTried  bool
	// restSince is when the group was first seen at rest since it last
	// moved (zero while it moves); lastMove when the last load-driven move
	// was decided. Both on the leader's clock.
	restSince time.Time
	lastMove  time.Time
	// model is the load line of the last judgement: where the load is,
	// for placing a change of members when the reports are stale.
	model *assign.LoadLine
	// warned holds the problems already warned about, by member and kind.
	warned map[string]map[string]bool
}

func newLoadBalancer(cfg Config, log hclog.Logger, counts *loadCounter) *loadBalancer {
	return &loadBalancer{cfg: cfg, log: log, counts: counts, warned: make(map[string]map[string]bool)}
}

// wanted returns the layout the plan must follow instead of Assign's
// answer, if any: the target, while the group has the shape it was made
// for.
func (b *loadBalancer) wanted(snap *schema.Snapshot, parts []assign.PartitionWeight, eligible []assign.MemberWeight) []assign.Slice {
	if b.cfg.Balance != BalanceLoad {
		return nil
	}
	shape := plan.GroupShape(snap, parts)
	if !b.adoptTried {
		b.adoptTried = true
		if t := adoptable(snap, parts, eligible); t != nil {
			b.target, b.targetShape = t, shape
		}
	}
	if b.target != nil && shape != b.targetShape {
		// The layout is placed by load: place the change by load too,
		// moving the least load, or width would undo the placement
		// (and load would move it back once the group is still).
		loads, _ := b.trusted(snap)
		if t := assign.StickyByLoad(parts, eligible, slicesOf(snap, parts), flatLoads(loads), b.model); t != nil {
			b.log.Info("members or partitions changed; placing the change by load")
			b.target, b.targetShape = t, shape
		} else {
			b.log.Info("members or partitions changed; placing the change by width, load is judged again once the group is still")
			b.target, b.targetShape = nil, ""
		}
	}
	return b.target
}

// slicesOf is snap's current ownership (Snapshot.Slices) of parts only: a
// topic left out of the assignment (its count could not be read, or it is
// being reset) is neither balanced nor counted.
func slicesOf(snap *schema.Snapshot, parts []assign.PartitionWeight) []assign.Slice {
	in := make(map[assign.TopicPartition]bool, len(parts))
	for _, p := range parts {
		in[p.TopicPartition] = true
	}
	var out []assign.Slice
	for _, s := range snap.Slices() {
		if in[s.TopicPartition] {
			out = append(out, s)
		}
	}
	return out
}

// flatLoads indexes members' reported ranges by range.
func flatLoads(loads map[string][]assign.RangeLoad) map[assign.RangeKey]assign.RangeLoad {
	out := make(map[assign.RangeKey]assign.RangeLoad)
	for _, rls := range loads {
		for _, rl := range rls {
			out[assign.RangeKey{TP: assign.TopicPartition{Topic: rl.Topic, Partition: rl.Partition}, Lo: rl.Lo, Hi: rl.Hi}] = rl
		}
	}
	return out
}

// fragmented reports whether layout has more ranges (adjacent ranges of one
// owner counting once) than a contiguous layout of members over parts.
func fragmented(layout []assign.Slice, parts, members int) bool {
	n := 0
	for i, s := range layout {
		if i == 0 || layout[i-1].TopicPartition != s.TopicPartition || layout[i-1].Owner != s.Owner || layout[i-1].Range.Hi != s.Range.Lo {
			n++
		}
	}
	return n > parts+members-1
}

// rested notes the outcome of a round: the group is at rest when the plan
// had nothing to do and no range is being handed off.
func (b *loadBalancer) rested(snap *schema.Snapshot, planned int, clock time.Time) {
	if planned > 0 || !allActive(snap) {
		b.restSince = time.Time{}
		return
	}
	if b.restSince.IsZero() {
		b.restSince = clock
	}
}

func allActive(snap *schema.Snapshot) bool {
	for _, r := range snap.Ranges {
		if r.Record.State != schema.StateActive {
			return false
		}
	}
	return true
}

// judge decides, on the load timer, whether to move by load; if so it sets
// the target and returns it. still is settle.go's verdict.
func (b *loadBalancer) judge(snap *schema.Snapshot, parts []assign.PartitionWeight, eligible []assign.MemberWeight, still bool, clock time.Time) []assign.Slice {
	loads, fresh := b.trusted(snap)
	if b.cfg.Balance != BalanceLoad || !still || b.restSince.IsZero() || !allActive(snap) {
		return nil
	}
	if !b.lastMove.IsZero() && clock.Sub(b.lastMove) < b.cfg.LoadCooldown {
		return nil
	}
	for id, at := range fresh {
		if !at.After(b.restSince) {
			delete(loads, id)
		}
	}
	// Wait until every current range is in a report that arrived since
	// the group came to rest: a range counted at the mean density would
	// make its owner look idle (or busy) when it is not, and the leader
	// would move ranges on what nobody measured.
	cur, reported := slicesOf(snap, parts), flatLoads(loads)
	for _, s := range cur {
		if _, ok := reported[assign.RangeKey{TP: s.TopicPartition, Lo: s.Range.Lo, Hi: s.Range.Hi}]; !ok {
			return nil
		}
	}
	p := assign.BalanceByLoad(parts, eligible, cur, reported, b.cfg.LoadMinGain)
	if p.Line != nil {
		b.model = p.Line
	}
	// A layout placed by assign.StickyByLoad is fragmented like Assign's: once
	// the group is still it is tidied into one span per member (which
	// BalanceByLoad's layout is), whatever the gain.
	tidy := !p.Move && p.Want != nil && p.Moved > 0 && fragmented(cur, len(parts), len(eligible))
	switch {
	case tidy:
		b.log.Info("tidying the load layout into one span per member", "busiest_before", fmt.Sprintf("%.3f", p.Before), "busiest_after", fmt.Sprintf("%.3f", p.After), "hash_space_moved", fmt.Sprintf("%.4f", p.Moved))
	case !p.Move:
		b.log.Debug("load judged; no move", "busiest", p.Before, "predicted", p.After, "why", p.Why)
		return nil
	case p.Before < b.cfg.LoadMinBusy:
		// Moving an idle group's ranges would pause keys for nothing.
		b.log.Debug("load judged; no move", "busiest", p.Before, "predicted", p.After, "why", "the busiest member is below LoadMinBusy")
		return nil
	default:
		b.log.Info("moving split points by load", "busiest_before", fmt.Sprintf("%.3f", p.Before), "busiest_after", fmt.Sprintf("%.3f", p.After), "hash_space_moved", fmt.Sprintf("%.4f", p.Moved))
	}
	b.target, b.targetShape, b.lastMove = p.Want, plan.GroupShape(snap, parts), clock
	b.counts.mu.Lock()
	b.counts.m.Moves++
	b.counts.m.HashSpaceMoved += p.Moved
	b.counts.m.Before, b.counts.m.After = p.Before, p.After
	b.counts.mu.Unlock()
	return p.Want
}

// trusted returns the reported ranges of each member that the leader can
// use (the member owns each, active, as the leader sees it), with when the
// report arrived; it warns once per member and kind of problem about the
// others. A report older than a change to one of its ranges is stale, not
// bad: it is left out without a warning.
func (b *loadBalancer) trusted(snap *schema.Snapshot) (map[string][]assign.RangeLoad, map[string]time.Time) {
	seen := make(map[string]bool)
	for id, err := range snap.BadLoads {
		seen[id] = true
		kind := "malformed"
		if _, ok := snap.Members[id]; !ok {
			kind = "unregistered"
		}
		b.warn(id, kind, "ignoring a load report: no range moves on it", "error", err)
	}
	loads := make(map[string][]assign.RangeLoad)
	fresh := make(map[string]time.Time)
	parts := snap.Partitions()
	for _, id := range slices.Sorted(maps.Keys(snap.Loads)) {
		rl := snap.Loads[id]
		seen[id] = true
		ok, stale, what := ownsReported(parts, id, rl)
		switch {
		case stale:
			continue
		case !ok:
			b.warn(id, "not owned", "ignoring a load report of ranges the member does not own: no range moves on it", "range", what)
			continue
		}
		loads[id] = rl.Report.Ranges
		fresh[id] = rl.Arrived
	}
	for id := range b.warned {
		if !seen[id] {
			delete(b.warned, id) // the report is gone: warn again if it comes back bad
		}
	}
	return loads, fresh
}

// warn logs a problem once per member and kind.
func (b *loadBalancer) warn(id, kind, msg string, args ...any) {
	if b.warned[id] == nil {
		b.warned[id] = make(map[string]bool)
	}
	if b.warned[id][kind] {
		return
	}
	b.warned[id][kind] = true
	b.log.Warn(msg, append([]any{"reporter", id, "problem", kind}, args...)...)
	b.counts.mu.Lock()
	b.counts.m.IgnoredReports++
	b.counts.mu.Unlock()
}

// ownsReported checks each range of member id's report against the ranges
// (by partition, in hash order): ok if id owns every one of them exactly
// and active; stale if one of them changed after the report was written.
func ownsReported(parts map[assign.TopicPartition][]schema.RangeState, id string, rl schema.ReceivedLoad) (ok, stale bool, what string) {
	ok = true
	for _, r := range rl.Report.Ranges {
		tp := assign.TopicPartition{Topic: r.Topic, Partition: r.Partition}
		want := ledger.HashRange{Lo: r.Lo, Hi: r.Hi}
		match := false
		for _, have := range parts[tp] {
			hr := have.Record.Range()
			if hr.Intersect(want).Empty() {
				continue
			}
			if have.Rev > rl.Rev {
				return false, true, ""
			}
			if hr == want && have.Record.Owner == id {
				if have.Record.State != schema.StateActive {
					return false, true, "" // being handed off: about to change
				}
				match = true
			}
		}
		if !match && ok {
			ok, what = false, fmt.Sprintf("%s/%d %s", r.Topic, r.Partition, want)
		}
	}
	return ok, false, what
}

// adoptable returns the current layout if a new leader may hold to it as
// its target: every range active, every assignable partition covered
// exactly, by eligible members only, every eligible member owning some,
// and no more ranges (adjacent ones of one owner counting once) than the
// contiguous layout would have (P + M − 1), so that nothing is left to
// place or to tidy. Otherwise nil: the width assignor goes on as usual.
func adoptable(snap *schema.Snapshot, parts []assign.PartitionWeight, eligible []assign.MemberWeight) []assign.Slice {
	if len(parts) == 0 || len(eligible) == 0 || !allActive(snap) {
		return nil
	}
	isEligible := make(map[string]bool, len(eligible))
	for _, m := range eligible {
		isEligible[m.ID] = true
	}
	have := snap.Partitions()
	owning := make(map[string]bool)
	var out []assign.Slice
	for _, p := range parts {
		at := uint64(0)
		for _, r := range have[p.TopicPartition] {
			if r.Record.Lo != at || !isEligible[r.Record.Owner] || r.EntryErr != nil {
				return nil
			}
			owning[r.Record.Owner] = true
			out = assign.AppendJoined(out, assign.Slice{TopicPartition: p.TopicPartition, Range: r.Record.Range(), Owner: r.Record.Owner})
			at = r.Record.Hi
		}
		if at != ledger.HashSpace {
			return nil
		}
	}
	if len(owning) != len(isEligible) || len(out) > len(parts)+len(eligible)-1 {
		return nil
	}
	return out
}
