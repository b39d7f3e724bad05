package assign

import (
	"slices"

	"github.com/keyshare/keyshare/ledger"
)

// StickyByLoad places a change of members (a join, a leave, a crash) on a
// layout balanced by load, moving as little load as it can: Assign's line
// mode with load in place of width. Each member's quota is its weight's
// share of the load; each keeps what it holds, in line order, until its
// quota is used up (cutting the last range it keeps where the quota runs
// out); each stretch nobody keeps goes first to the member whose kept span
// ends where it begins, if that member still needs load, and otherwise to
// the first member, by id, that does. Like Assign it leaves fragments; the
// leader tidies them with BalanceByLoad's contiguous layout once the group
// is still.
//
// The load is model (the line the leader last judged, which says where
// the load is whatever the ranges are now) when it is of the same
// partitions, and otherwise the line built from the reports of the current
// ranges: in a burst of joins most ranges are being handed off and their
// reports are stale.
//
// It answers nil with no more members than partitions (whole partitions
// are placed by width, then judged by load) or when there is no load to
// go by.
//
// Length: one pass of the algorithm (each member's need, what it keeps of
// its spans, the rest handed out in line order, the spans turned into
// slices) whose steps all draw down one need map measured on one load
// line; cut, each part would take the line, the need map, the rounding
// floor and the members.
func StickyByLoad(parts []PartitionWeight, members []MemberWeight, cur []Slice, loads map[RangeKey]RangeLoad, model *LoadLine) []Slice {
	if len(members) == 0 || len(parts) == 0 {
		return nil
	}
	parts, members = sortedUnique(parts, members)
	if len(members) <= len(parts) {
		return nil
	}
	tps := make([]TopicPartition, len(parts))
	for i, p := range parts {
		tps[i] = p.TopicPartition
	}
	l, ok := model, model != nil && slices.Equal(model.parts, tps)
	if !ok {
		l, ok = newLoadLine(tps, cur, loads)
	}
	if !ok {
		return nil
	}
	var sumW float64
	for _, m := range members {
		sumW += float64(memberWeight(m.Weight))
	}
	need := make(map[string]float64, len(members))
	for _, m := range members {
		need[m.ID] = l.load * float64(memberWeight(m.Weight)) / sumW
	}
	held := make(map[string][]span)
	for _, s := range cur {
		if _, ok := need[s.Owner]; !ok {
			continue
		}
		if lo, ok := l.position(s.TopicPartition, s.Range.Intersect(ledger.Full).Lo); ok && !s.Range.Intersect(ledger.Full).Empty() {
			held[s.Owner] = append(held[s.Owner], span{lo: lo, hi: lo + s.Range.Intersect(ledger.Full).Len(), owner: s.Owner})
		}
	}
	// A need below this is rounding: it gets no sliver of its own.
	eps := 1e-9 * l.load
	var kept []span
	for _, m := range members {
		spans := held[m.ID]
		slices.SortFunc(spans, compareSpans)
		for _, sp := range spans {
			if need[m.ID] <= eps {
				break
			}
			if ld := l.between(sp.lo, sp.hi); ld > need[m.ID] {
				sp.hi = l.cut(sp.lo, sp.hi, l.at(sp.lo)+need[m.ID])
			}
			need[m.ID] -= l.between(sp.lo, sp.hi)
			kept = append(kept, sp)
		}
	}
	slices.SortFunc(kept, compareSpans)
	// cur comes from etcd: trim overlaps so that no hash has two owners.
	var out []span
	endAt := make(map[uint64]string)
	give := func(lo, hi uint64) {
		for at := lo; at < hi; {
			who := ""
			if id, ok := endAt[at]; ok && need[id] > eps {
				who = id
			}
			for _, m := range members {
				if who == "" && need[m.ID] > eps {
					who = m.ID
				}
			}
			if who == "" { // rounding left a sliver: to the neediest
				for _, m := range members {
					if who == "" || need[m.ID] > need[who] {
						who = m.ID
					}
				}
			}
			c := hi
			if l.between(at, hi) > need[who] && need[who] > eps {
				c = l.cut(at, hi, l.at(at)+need[who])
			}
			need[who] -= l.between(at, c)
			out = append(out, span{lo: at, hi: c, owner: who})
			endAt[c] = who
			at = c
		}
	}
	at := uint64(0)
	for _, sp := range kept {
		sp.lo = max(sp.lo, at)
		if sp.lo >= sp.hi {
			continue
		}
		give(at, sp.lo)
		out = append(out, sp)
		endAt[sp.hi] = sp.owner
		at = sp.hi
	}
	give(at, l.total)
	var res []Slice
	for _, sp := range out {
		for _, s := range l.slices(sp.lo, sp.hi, sp.owner) {
			res = AppendJoined(res, s)
		}
	}
	return res
}
