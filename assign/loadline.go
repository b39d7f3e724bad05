package assign

import (
	"cmp"
	"slices"
	"sort"

	"github.com/keyshare/keyshare/ledger"
)

// The load line: docs/assignor.md's line of partitions laid end to end, with
// each hash weighted by its measured load instead of by 1.
//
// Partition i takes positions [i·2^32, (i+1)·2^32) (partition weights play
// no part: load is measured, not declared). Over each current range the
// density (busy worker-seconds per second, per hash) is piecewise constant:
// one piece per histogram bucket the owner reported, each hot key a piece
// of width one carrying its own load, and a range nobody reported at the
// group's mean density. A small floor is added everywhere, so idle hash
// space is still shared out rather than piled on one member. Cutting the
// line where the cumulative load reaches each member's quota balances load
// the way Assign's cuts balance width.

// loadFloor is the share of the total load spread evenly over every hash:
// enough that an idle stretch of hash space is not free (a member would
// otherwise be given all of it), small enough not to blur measured skew.
const loadFloor = 0.02

// loadPiece is a stretch [lo, hi) of the load line of constant density.
type loadPiece struct {
	lo, hi uint64
	per    float64 // load per hash
	cum    float64 // load of the line before lo
}

// LoadLine is the cumulative load over the line of partitions.
type LoadLine struct {
	parts  []TopicPartition // sorted
	index  map[TopicPartition]int
	pieces []loadPiece // in line order, covering [0, total) exactly
	total  uint64      // line length
	load   float64     // load of the whole line
}

// RangeKey names a reported range.
type RangeKey struct {
	TP     TopicPartition
	Lo, Hi uint64
}

// newLoadLine builds the load line of parts from the current ranges (cur:
// every range of the group, in any order) and the loads reported for them
// (by range; a range with no report counts at the mean density of those
// with one). ok is false when nothing was reported, or nothing was busy:
// there is no load to balance.
func newLoadLine(parts []TopicPartition, cur []Slice, loads map[RangeKey]RangeLoad) (*LoadLine, bool) {
	l := &LoadLine{parts: slices.Clone(parts), index: make(map[TopicPartition]int, len(parts))}
	slices.SortFunc(l.parts, CompareTP)
	l.parts = slices.Compact(l.parts)
	for i, tp := range l.parts {
		l.index[tp] = i
	}
	l.total = uint64(len(l.parts)) * ledger.HashSpace

	cur = slices.Clone(cur)
	slices.SortFunc(cur, func(a, b Slice) int {
		return cmp.Or(CompareTP(a.TopicPartition, b.TopicPartition), cmp.Compare(a.Range.Lo, b.Range.Lo), cmp.Compare(a.Range.Hi, b.Range.Hi), cmp.Compare(a.Owner, b.Owner))
	})
	// The mean density of reported ranges prices the others (summed in
	// line order: the result must not depend on the order of cur).
	var busy, width float64
	for _, s := range cur {
		if rl, ok := loads[RangeKey{s.TopicPartition, s.Range.Lo, s.Range.Hi}]; ok {
			if _, in := l.index[s.TopicPartition]; in {
				busy += rl.BusyPerSec
				width += float64(s.Range.Len())
			}
		}
	}
	if width == 0 || busy <= 0 || l.total == 0 {
		return nil, false
	}
	mean := busy / width

	// Pieces without the floor, in line order; gaps in cur count at the
	// mean (the planner fills them with new ranges).
	var raw []loadPiece
	add := func(lo, hi uint64, per float64) {
		if lo < hi {
			raw = append(raw, loadPiece{lo: lo, hi: hi, per: per})
		}
	}
	ci := 0
	for i, tp := range l.parts {
		base := uint64(i) * ledger.HashSpace
		at := uint64(0)
		for ; ci < len(cur) && CompareTP(cur[ci].TopicPartition, tp) < 0; ci++ {
		}
		for ; ci < len(cur) && cur[ci].TopicPartition == tp; ci++ {
			r := cur[ci].Range.Intersect(ledger.HashRange{Lo: at, Hi: ledger.HashSpace})
			if r.Empty() {
				continue // overlapping or damaged: the earlier range wins
			}
			add(base+at, base+r.Lo, mean)
			rl, ok := loads[RangeKey{tp, cur[ci].Range.Lo, cur[ci].Range.Hi}]
			if !ok {
				add(base+r.Lo, base+r.Hi, mean)
			} else {
				for _, p := range rangePieces(rl) {
					lo, hi := max(p.lo, r.Lo), min(p.hi, r.Hi)
					add(base+lo, base+hi, p.per)
				}
			}
			at = r.Hi
		}
		add(base+at, base+ledger.HashSpace, mean)
	}
	var sum float64
	for _, p := range raw {
		sum += p.per * float64(p.hi-p.lo)
	}
	floor := loadFloor * sum / float64(l.total)
	for _, p := range raw {
		p.per += floor
		p.cum = l.load
		l.load += p.per * float64(p.hi-p.lo)
		l.pieces = append(l.pieces, p)
	}
	return l, l.load > 0
}

// rangePieces spreads one range's reported load over its hash space: the
// buckets' shape scaled to BusyPerSec (uniform when there is no histogram),
// with each hot key's load taken out of its bucket and put on its own hash.
// Positions are hashes of the partition.
func rangePieces(rl RangeLoad) []loadPiece {
	lo, hi := rl.Lo, rl.Hi
	n := uint64(len(rl.Buckets))
	var bsum float64
	for _, b := range rl.Buckets {
		bsum += b
	}
	var out []loadPiece
	if n == 0 || bsum <= 0 || hi-lo < n {
		out = []loadPiece{{lo: lo, hi: hi, per: rl.BusyPerSec / float64(hi-lo)}}
	} else {
		w := (hi - lo) / n
		scale := rl.BusyPerSec / bsum
		for i, b := range rl.Buckets {
			p := loadPiece{lo: lo + uint64(i)*w, hi: lo + uint64(i+1)*w}
			if uint64(i) == n-1 {
				p.hi = hi
			}
			p.per = b * scale / float64(p.hi-p.lo)
			out = append(out, p)
		}
	}
	for _, h := range rl.Hot {
		if h.Hash < lo || h.Hash >= hi || h.BusyPerSec <= 0 {
			continue
		}
		i := sort.Search(len(out), func(i int) bool { return out[i].hi > h.Hash })
		p := out[i]
		// The key's time is in its bucket too: move it onto the key's hash.
		rest := max(0, p.per*float64(p.hi-p.lo)-h.BusyPerSec)
		per := rest / float64(p.hi-p.lo)
		var split []loadPiece
		if p.lo < h.Hash {
			split = append(split, loadPiece{lo: p.lo, hi: h.Hash, per: per})
		}
		split = append(split, loadPiece{lo: h.Hash, hi: h.Hash + 1, per: per + h.BusyPerSec})
		if h.Hash+1 < p.hi {
			split = append(split, loadPiece{lo: h.Hash + 1, hi: p.hi, per: per})
		}
		out = slices.Replace(out, i, i+1, split...)
	}
	return out
}

// at is the load of the line before position x.
func (l *LoadLine) at(x uint64) float64 {
	if x >= l.total {
		return l.load
	}
	i := sort.Search(len(l.pieces), func(i int) bool { return l.pieces[i].hi > x })
	p := l.pieces[i]
	return p.cum + p.per*float64(x-p.lo)
}

// between is the load of [lo, hi).
func (l *LoadLine) between(lo, hi uint64) float64 {
	if hi <= lo {
		return 0
	}
	return l.at(hi) - l.at(lo)
}

// cut returns the position c in (from, limit] whose load before it is
// closest to goal: the first position reaching goal, or the one before it
// if that is closer (and not from itself: a cut takes at least one hash).
func (l *LoadLine) cut(from, limit uint64, goal float64) uint64 {
	if limit <= from+1 {
		return limit
	}
	c := min(max(l.first(goal), from+1), limit)
	if c-1 > from && goal-l.at(c-1) < l.at(c)-goal {
		c--
	}
	return c
}

// last is the last position whose load before it is at most goal.
func (l *LoadLine) last(goal float64) uint64 {
	i := sort.Search(len(l.pieces), func(i int) bool {
		p := l.pieces[i]
		return p.cum+p.per*float64(p.hi-p.lo) > goal
	})
	if i == len(l.pieces) {
		return l.total
	}
	p := l.pieces[i]
	c := p.lo
	if goal > p.cum {
		c += uint64(min((goal-p.cum)/p.per, float64(p.hi-p.lo)))
	}
	for c < p.hi && l.at(c+1) <= goal {
		c++
	}
	for c > p.lo && l.at(c) > goal {
		c--
	}
	return c
}

// first is the first position whose load before it is at least goal.
func (l *LoadLine) first(goal float64) uint64 {
	if goal <= 0 {
		return 0
	}
	i := sort.Search(len(l.pieces), func(i int) bool {
		p := l.pieces[i]
		return p.cum+p.per*float64(p.hi-p.lo) >= goal
	})
	if i == len(l.pieces) {
		return l.total
	}
	p := l.pieces[i]
	c := p.lo + uint64(min(max(0, (goal-p.cum)/p.per), float64(p.hi-p.lo)))
	for c < p.hi && l.at(c) < goal {
		c++
	}
	for c > p.lo && l.at(c-1) >= goal {
		c--
	}
	return c
}

// position is hash h of partition tp on the line.
func (l *LoadLine) position(tp TopicPartition, h uint64) (uint64, bool) {
	i, ok := l.index[tp]
	return uint64(i)*ledger.HashSpace + h, ok
}

// slices cuts [lo, hi) of the line at partition boundaries.
func (l *LoadLine) slices(lo, hi uint64, owner string) []Slice {
	var out []Slice
	for lo < hi {
		i := lo / ledger.HashSpace
		end := min(hi, (i+1)*ledger.HashSpace)
		base := i * ledger.HashSpace
		out = append(out, Slice{TopicPartition: l.parts[i], Range: ledger.HashRange{Lo: lo - base, Hi: end - base}, Owner: owner})
		lo = end
	}
	return out
}
