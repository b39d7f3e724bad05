package assign

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/keyshare/keyshare/ledger"
)

// Balancing by load: where the members' load reports say the work is, and
// the layout that shares it out by member weight.
//
// BalanceByLoad is a pure function: the leader calls it on its own timer
// with the load reports it trusts, and moves ranges only when it says so.
// It cuts the load line (the partitions' measured load, end to end) into
// one span per member, keeping the members in the order of what they hold
// now (as AssignContiguous does), so a move shifts split points rather than
// reshuffling the line, and a partition has at most as many ranges as
// owners. Each member's quota is its weight's share of the load not yet
// given out, so a member whose span ends on a hot key's hash (a key busier
// than its share) leaves the key to the next member, which gets it alone,
// in a range [h, h+1), and the rest is shared by the members after it:
// the key's neighbours are not stuck behind it.
//
// With no more members than partitions, width balance gives whole
// partitions. Load balance first tries whole partitions placed by load
// (largest first, each to the member with the least load per weight), and
// splits partitions only when the split layout's busiest member is lighter
// than the whole one's by the minimum gain as well: one partition carries
// clearly more than a member's share (four partitions, four members, one
// partition with 55 % of the load: whole partitions leave one member with
// 55 %, the split layout gives each about 25 %).

// LoadPlan is BalanceByLoad's answer.
type LoadPlan struct {
	// Want is the layout balanced by load; nil when there is nothing to
	// balance.
	Want []Slice
	// Before and After are the busiest member's load (busy worker-seconds
	// per second, per mean member weight) now and, as predicted from the
	// reports, with Want.
	Before, After float64
	// Moved is the share of the group's hash space whose owner changes.
	Moved float64
	// Move says whether Want gains at least the minimum gain.
	Move bool
	// Why says why not, when Move is false.
	Why string
	// Line is the load model the layout was cut from (nil when there was
	// no load): where the load is, by line position, whatever the ranges.
	Line *LoadLine
}

// BalanceByLoad computes the layout of parts among members that balances
// the load reported for the current ranges cur (Snapshot.Slices), and
// whether moving to it gains at least minGain: the busiest member's load
// now divided by its predicted load after.
func BalanceByLoad(parts []PartitionWeight, members []MemberWeight, cur []Slice, loads map[RangeKey]RangeLoad, minGain float64) LoadPlan {
	if len(parts) == 0 || len(members) == 0 {
		return LoadPlan{Why: "no partitions or no members"}
	}
	parts, members = sortedUnique(parts, members)
	weight := make(map[string]float64, len(members))
	var sumW float64
	for _, m := range members {
		weight[m.ID] = float64(memberWeight(m.Weight))
		sumW += weight[m.ID]
	}
	for _, s := range cur {
		if _, ok := weight[s.Owner]; !ok {
			return LoadPlan{Why: fmt.Sprintf("%s owns a range and is not an eligible member", s.Owner)}
		}
	}
	tps := make([]TopicPartition, len(parts))
	for i, p := range parts {
		tps[i] = p.TopicPartition
	}
	l, ok := newLoadLine(tps, cur, loads)
	if !ok {
		return LoadPlan{Why: "no load reported"}
	}
	meanW := sumW / float64(len(members))
	busiest := func(s []Slice) float64 {
		load := make(map[string]float64, len(members))
		for _, sl := range s {
			if lo, ok := l.position(sl.TopicPartition, sl.Range.Lo); ok {
				load[sl.Owner] += l.between(lo, lo+sl.Range.Len())
			}
		}
		var m float64
		for id, v := range load {
			m = max(m, v/weight[id]*meanW)
		}
		return m
	}

	want := l.cutByLoad(members, weight, l.placeScattered(members, weight, cur, l.order(members, cur), busiest))
	if len(members) <= len(parts) {
		if whole := l.wholeByLoad(members, weight, cur); busiest(want)*minGain > busiest(whole) {
			want = whole
		}
	}
	p := LoadPlan{Want: want, Before: busiest(cur), After: busiest(want), Moved: movedShare(cur, want, len(parts)), Line: l}
	switch {
	case p.Moved == 0:
		p.Why = "the layout is already balanced by load"
	case p.After <= 0 || p.Before < p.After*minGain:
		p.Why = fmt.Sprintf("the gain %.2f is below the minimum %.2f", p.Before/max(p.After, 1e-300), minGain)
	default:
		p.Move = true
	}
	return p
}

// order lists members by where they hold hash space now (the start of the
// largest range each holds), members holding nothing last, by id.
func (l *LoadLine) order(members []MemberWeight, cur []Slice) []string {
	type anchor struct {
		at, width uint64
	}
	anchors := make(map[string]anchor)
	for _, s := range cur {
		at, ok := l.position(s.TopicPartition, s.Range.Lo)
		if !ok {
			continue
		}
		a, seen := anchors[s.Owner]
		if w := s.Range.Len(); !seen || w > a.width || (w == a.width && at < a.at) {
			anchors[s.Owner] = anchor{at, w}
		}
	}
	ids := make([]string, 0, len(members))
	for _, m := range members {
		ids = append(ids, m.ID)
	}
	slices.SortStableFunc(ids, func(a, b string) int {
		x, okA := anchors[a]
		y, okB := anchors[b]
		switch {
		case okA && okB:
			return cmp.Compare(x.at, y.at)
		case okA:
			return -1
		case okB:
			return 1
		}
		return 0 // ids are sorted already
	})
	return ids
}

// maxScattered bounds how many scattered members placeScattered tries at
// every position, and maxPlaceWork the scattered members × positions ×
// members of all the tries (each try is a cut of the whole line, about 40
// passes over the members): about 0.6 s of CPU on the line of 64
// partitions and 130 members measured while writing this.
const (
	maxScattered = 4
	maxPlaceWork = 100_000
)

// placeScattered returns order with each member that holds more than one
// span (a newcomer's slivers after a join placed by StickyByLoad) moved to
// the position where the cut moves the least hash space, as long as the
// busiest member is no more than 5 % busier than with order as it is. Its
// largest span says little about where it belongs: on a skewed line the
// wrong place can double what tidying moves. Members are tried one at a
// time, by id; with more of them than maxScattered, or more work than
// maxPlaceWork, order is kept.
func (l *LoadLine) placeScattered(members []MemberWeight, weight map[string]float64, cur []Slice, order []string, busiest func([]Slice) float64) []string {
	var held []span
	for _, s := range cur {
		if lo, ok := l.position(s.TopicPartition, s.Range.Lo); ok {
			held = append(held, span{lo: lo, hi: lo + s.Range.Len(), owner: s.Owner})
		}
	}
	slices.SortFunc(held, compareSpans)
	spans := make(map[string]int)
	for i, sp := range held {
		if i == 0 || held[i-1].owner != sp.owner || held[i-1].hi != sp.lo {
			spans[sp.owner]++
		}
	}
	var scattered []string
	for _, id := range order {
		if spans[id] > 1 {
			scattered = append(scattered, id)
		}
	}
	if len(scattered) == 0 || len(scattered) > maxScattered || len(scattered)*(len(order)+1)*len(order) > maxPlaceWork {
		return order
	}
	slices.Sort(scattered)
	n := len(l.parts)
	base := busiest(l.cutByLoad(members, weight, order))
	for _, id := range scattered {
		rest := slices.DeleteFunc(slices.Clone(order), func(x string) bool { return x == id })
		best, bestMoved := order, movedShare(cur, l.cutByLoad(members, weight, order), n)
		for k := range len(rest) + 1 {
			o := slices.Insert(slices.Clone(rest), k, id)
			w := l.cutByLoad(members, weight, o)
			if m := movedShare(cur, w, n); m < bestMoved && busiest(w) <= 1.05*base {
				best, bestMoved = o, m
			}
		}
		order = best
	}
	return order
}

// cutByLoad cuts the line into one span per member, in order.
//
// First it finds the least load B such that the spans, in this order, can
// each carry at most B times their member's weight (bisection on B; the
// greedy test of a B is exact for a fixed order). Then each member in turn
// gets its weight's share of the load left after the spans before it,
// clamped so that it carries at most B·weight and leaves the members after
// it able to cover the rest within B. A hot key busier than a member's
// share (pinned) is never part of a wider span when that is avoidable: the
// span before it ends at its hash and the next member gets it alone, and
// the load of the hot keys ahead, and the members they will take, are left
// out of the shares of the others.
func (l *LoadLine) cutByLoad(members []MemberWeight, weight map[string]float64, order []string) []Slice {
	ws := make([]float64, len(order))
	var remW float64
	for i, id := range order {
		ws[i] = weight[id]
		remW += ws[i]
	}
	meanW := remW / float64(len(order))
	b := l.bottleneck(ws) * (1 + 1e-9)
	// reach[i] is the first position from which members i... can cover
	// the rest of the line within b.
	reach := make([]uint64, len(order)+1)
	reach[len(order)] = l.total
	for i := len(order) - 1; i >= 0; i-- {
		reach[i] = l.first(l.at(reach[i+1]) - b*ws[i])
	}
	pinned := l.pinned(len(members))
	var aheadLoad float64
	for _, p := range pinned {
		aheadLoad += l.between(p, p+1)
	}
	var out []Slice
	at := uint64(0)
	for i, id := range order {
		for len(pinned) > 0 && pinned[0] < at {
			aheadLoad -= l.between(pinned[0], pinned[0]+1)
			pinned = pinned[1:]
		}
		c := l.total
		if i < len(order)-1 {
			from := l.at(at)
			if len(pinned) > 0 && pinned[0] == at {
				c = at + 1 // the hot key alone
			} else {
				others := max(remW-float64(len(pinned))*meanW, weight[id])
				goal := from + max(0, l.load-from-aheadLoad)*weight[id]/others
				limit := l.total
				if len(pinned) > 0 {
					limit = pinned[0]
				}
				c = l.cut(at, limit, goal)
			}
			most := l.last(from + b*weight[id])
			if c < reach[i+1] {
				// The members after cannot cover the rest from c: take
				// more, up to the next hot key if that is within reach,
				// so that the next member gets it alone.
				c = reach[i+1]
				if len(pinned) > 0 && pinned[0] > c && pinned[0] <= most {
					c = pinned[0]
				}
			}
			c = max(min(c, most), at)
		}
		out = append(out, l.slices(at, c, id)...)
		at, remW = c, remW-weight[id]
	}
	return out
}

// bottleneck is the least load B (to a relative 1e-6) such that the line
// can be cut into spans, one per weight in ws in order, each carrying at
// most B times its weight.
func (l *LoadLine) bottleneck(ws []float64) float64 {
	lo, hi := 0.0, l.load/slices.Min(ws)*(1+1e-9)
	for hi-lo > 1e-6*hi {
		mid := (lo + hi) / 2
		at := uint64(0)
		for _, w := range ws {
			at = l.last(l.at(at) + mid*w)
		}
		if at >= l.total {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// pinned returns the positions of the hot keys (hashes reported as hot,
// pieces of width one) that carry more than a member's share of the load
// beside them, in line order: the busiest first, each judged against the
// load and members left once the ones before it have a member each; at
// most members−1 of them.
func (l *LoadLine) pinned(members int) []uint64 {
	type hot struct {
		at   uint64
		load float64
	}
	var hots []hot
	for _, p := range l.pieces {
		if p.hi-p.lo == 1 {
			hots = append(hots, hot{p.lo, p.per})
		}
	}
	slices.SortFunc(hots, func(a, b hot) int { return cmp.Or(cmp.Compare(b.load, a.load), cmp.Compare(a.at, b.at)) })
	var out []uint64
	rest := l.load
	for _, h := range hots {
		if len(out) >= members-1 || h.load <= rest/float64(members-len(out)) {
			break
		}
		out = append(out, h.at)
		rest -= h.load
	}
	slices.Sort(out)
	return out
}

// wholeByLoad places whole partitions by load: the busiest first, each to
// the member with the least load per weight so far (ties: the member that
// holds most of it now, then the lower id).
func (l *LoadLine) wholeByLoad(members []MemberWeight, weight map[string]float64, cur []Slice) []Slice {
	type part struct {
		i    int
		load float64
	}
	ps := make([]part, len(l.parts))
	for i := range l.parts {
		lo := uint64(i) * ledger.HashSpace
		ps[i] = part{i, l.between(lo, lo+ledger.HashSpace)}
	}
	slices.SortStableFunc(ps, func(a, b part) int { return cmp.Compare(b.load, a.load) })
	held := make(map[TopicPartition]map[string]uint64)
	for _, s := range cur {
		if held[s.TopicPartition] == nil {
			held[s.TopicPartition] = make(map[string]uint64)
		}
		held[s.TopicPartition][s.Owner] += s.Range.Len()
	}
	load := make(map[string]float64, len(members))
	var out []Slice
	for _, p := range ps {
		tp := l.parts[p.i]
		best := ""
		for _, m := range members {
			if best == "" {
				best = m.ID
				continue
			}
			a, b := load[m.ID]/weight[m.ID], load[best]/weight[best]
			if a < b || (a == b && held[tp][m.ID] > held[tp][best]) {
				best = m.ID
			}
		}
		load[best] += p.load
		out = append(out, Slice{TopicPartition: tp, Range: ledger.Full, Owner: best})
	}
	slices.SortFunc(out, func(a, b Slice) int { return CompareTP(a.TopicPartition, b.TopicPartition) })
	return out
}

// movedShare is the share of the hash space of n partitions whose owner
// differs between a and b.
func movedShare(a, b []Slice, n int) float64 {
	by := func(s []Slice) map[TopicPartition][]Slice {
		m := make(map[TopicPartition][]Slice)
		for _, x := range s {
			m[x.TopicPartition] = append(m[x.TopicPartition], x)
		}
		return m
	}
	ma, mb := by(a), by(b)
	var kept uint64
	for tp, xs := range ma {
		for _, x := range xs {
			for _, y := range mb[tp] {
				if x.Owner == y.Owner {
					kept += x.Range.Intersect(y.Range).Len()
				}
			}
		}
	}
	total := float64(n) * float64(ledger.HashSpace)
	return (total - float64(kept)) / total
}
