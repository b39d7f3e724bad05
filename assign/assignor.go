package assign

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/keyshare/keyshare/ledger"
)

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// PartitionWeight is a partition the assignor places, with its weight: a
// partition of weight 2 counts as twice the work of one of weight 1 when
// members share partitions. Weight 0 means 1.
type PartitionWeight struct {
	TopicPartition
	Weight int
}

// MemberWeight is an eligible member and its capacity. Weight 0 or less means
// 1; a weight above MaxWeight counts as MaxWeight.
type MemberWeight struct {
	ID     string
	Weight int
}

// Slice is a hash range of a partition and the member that owns it.
type Slice struct {
	TopicPartition
	Range ledger.HashRange
	Owner string
}

// Assign computes which member owns which hash range of every partition. It is
// a pure function of its inputs; the leader calls it on every change.
//
//   - Every partition's hash space is covered exactly, without gap or overlap.
//   - With no more members than partitions, members get whole partitions (each
//     partition is read by one member).
//   - With more members, the partitions are laid end to end on a line (each as
//     long as its weight) and the line is cut into member shares, each within
//     one hash of its weighted ideal. A fresh cut reads at most P + M − 1
//     partitions in total.
//   - It is sticky: each member keeps as much of what it had in prev as its new
//     share allows, so the hash space that moves is the least possible for
//     the new shares.
//
// The least movement leaves fragments (a newcomer gets a sliver of every
// other member's share); the leader settles them with AssignContiguous
// once no handoff is under way.
//
// With no members it returns nil.
func Assign(parts []PartitionWeight, members []MemberWeight, prev []Slice) []Slice {
	if len(members) == 0 || len(parts) == 0 {
		return nil
	}
	parts, members = sortedUnique(parts, members)
	if len(members) <= len(parts) {
		return assignWhole(parts, members, prev)
	}
	return assignLine(parts, members, prev)
}

// sortedUnique returns copies of parts and members sorted, without
// duplicates, so that an assignment does not depend on their order.
func sortedUnique(parts []PartitionWeight, members []MemberWeight) ([]PartitionWeight, []MemberWeight) {
	parts = slices.Clone(parts)
	slices.SortFunc(parts, func(a, b PartitionWeight) int { return CompareTP(a.TopicPartition, b.TopicPartition) })
	parts = slices.CompactFunc(parts, func(a, b PartitionWeight) bool { return a.TopicPartition == b.TopicPartition })
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b MemberWeight) int { return cmp.Compare(a.ID, b.ID) })
	members = slices.CompactFunc(members, func(a, b MemberWeight) bool { return a.ID == b.ID })
	return parts, members
}

func CompareTP(a, b TopicPartition) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

func weightOf(w int) uint64 {
	if w <= 0 {
		return 1
	}
	return uint64(w)
}

// memberWeight is w within 1..MaxWeight. Config.Validate and DecodeMember
// refuse weights outside it; the clamp keeps the sum of any number of
// members' weights far below 2^64, so that it cannot wrap (a wrapped sum
// below one member's weight makes bits.Div64 panic).
func memberWeight(w int) uint64 {
	return min(weightOf(w), MaxWeight)
}

// quotas splits total units among members in proportion to their weights by
// largest remainder: each share is the floor or the ceiling of its ideal.
func quotas(total uint64, members []MemberWeight) map[string]uint64 {
	var sum uint64
	for _, m := range members {
		sum += memberWeight(m.Weight)
	}
	q := make(map[string]uint64, len(members))
	type rem struct {
		id string
		r  uint64
	}
	rems := make([]rem, 0, len(members))
	var given uint64
	for _, m := range members {
		hi, lo := bits.Mul64(total, memberWeight(m.Weight))
		share, r := bits.Div64(hi, lo, sum)
		q[m.ID] = share
		given += share
		rems = append(rems, rem{m.ID, r})
	}
	slices.SortStableFunc(rems, func(a, b rem) int { return cmp.Compare(b.r, a.r) })
	for i := 0; given < total; i++ {
		q[rems[i].id]++
		given++
	}
	return q
}

// assignWhole gives whole partitions: each member keeps the partitions it
// owned (or owned most of) up to its quota; the rest go to members below
// their quota.
func assignWhole(parts []PartitionWeight, members []MemberWeight, prev []Slice) []Slice {
	quota := quotas(uint64(len(parts)), members)
	// The member that held the most of each partition before.
	most := make(map[TopicPartition]string)
	held := make(map[TopicPartition]map[string]uint64)
	for _, s := range prev {
		if _, ok := quota[s.Owner]; !ok {
			continue
		}
		if held[s.TopicPartition] == nil {
			held[s.TopicPartition] = make(map[string]uint64)
		}
		held[s.TopicPartition][s.Owner] += s.Range.Len()
	}
	for tp, byOwner := range held {
		best, bestLen := "", uint64(0)
		for id, n := range byOwner {
			if n > bestLen || (n == bestLen && id < best) {
				best, bestLen = id, n
			}
		}
		most[tp] = best
	}
	owner := make(map[TopicPartition]string, len(parts))
	count := make(map[string]uint64, len(members))
	for _, p := range parts {
		if id, ok := most[p.TopicPartition]; ok && count[id] < quota[id] {
			owner[p.TopicPartition] = id
			count[id]++
		}
	}
	mi := 0
	for _, p := range parts {
		if _, ok := owner[p.TopicPartition]; ok {
			continue
		}
		for count[members[mi].ID] >= quota[members[mi].ID] {
			mi++
		}
		owner[p.TopicPartition] = members[mi].ID
		count[members[mi].ID]++
	}
	out := make([]Slice, 0, len(parts))
	for _, p := range parts {
		out = append(out, Slice{TopicPartition: p.TopicPartition, Range: ledger.Full, Owner: owner[p.TopicPartition]})
	}
	return out
}

// span is an interval [lo, hi) of the line on which partitions lie end to end.
type span struct {
	lo, hi uint64
	owner  string
}

// compareSpans orders spans by start, then end, then owner. The order is
// total so that the result does not depend on the order of prev when a
// damaged prev has two slices starting at the same hash.
func compareSpans(a, b span) int {
	return cmp.Or(cmp.Compare(a.lo, b.lo), cmp.Compare(a.hi, b.hi), cmp.Compare(a.owner, b.owner))
}

// line maps between partitions' hash ranges and positions on the line. A
// partition of weight w takes w × HashSpace positions; its hash h sits at
// start + h×w, so cuts inside it are rounded to multiples of w.
type line struct {
	parts  []PartitionWeight
	starts []uint64
	total  uint64
	index  map[TopicPartition]int
}

func newLine(parts []PartitionWeight) *line {
	l := &line{parts: parts, index: make(map[TopicPartition]int, len(parts))}
	for i, p := range parts {
		l.index[p.TopicPartition] = i
		l.starts = append(l.starts, l.total)
		l.total += weightOf(p.Weight) * ledger.HashSpace
	}
	return l
}

func (l *line) toSpan(s Slice) (span, bool) {
	i, ok := l.index[s.TopicPartition]
	if !ok {
		return span{}, false
	}
	// A range outside the hash space (never written by Assign, but prev is
	// only as good as its source) would claim line positions of other
	// partitions or beyond the line's end, and the free space would no
	// longer add up to what members still need: keep only its valid part.
	r := s.Range.Intersect(ledger.Full)
	if r.Empty() {
		return span{}, false
	}
	w := weightOf(l.parts[i].Weight)
	return span{lo: l.starts[i] + r.Lo*w, hi: l.starts[i] + r.Hi*w, owner: s.Owner}, true
}

// toSlices cuts a span at partition boundaries.
func (l *line) toSlices(sp span) []Slice {
	var out []Slice
	for i, p := range l.parts {
		w := weightOf(p.Weight)
		start, end := l.starts[i], l.starts[i]+w*ledger.HashSpace
		lo, hi := max(sp.lo, start), min(sp.hi, end)
		if lo >= hi {
			continue
		}
		r := ledger.HashRange{Lo: (lo - start + w - 1) / w, Hi: (hi - start + w - 1) / w}
		if r.Empty() {
			continue
		}
		out = append(out, Slice{TopicPartition: p.TopicPartition, Range: r, Owner: sp.owner})
	}
	return out
}

// heldBy is what each member with a quota held in prev, as spans of l.
func (l *line) heldBy(prev []Slice, quota map[string]uint64) map[string][]span {
	held := make(map[string][]span)
	for _, s := range prev {
		if _, ok := quota[s.Owner]; !ok {
			continue
		}
		if sp, ok := l.toSpan(s); ok {
			held[s.Owner] = append(held[s.Owner], sp)
		}
	}
	return held
}

// assignLine lays partitions end to end and gives each member a share of the
// line, keeping what it had where its share allows.
//
// Length: the keep, trim and fill steps draw down one need map over one
// line, in an order that is the algorithm; cut, each would take the line,
// the quotas and the need map.
func assignLine(parts []PartitionWeight, members []MemberWeight, prev []Slice) []Slice {
	l := newLine(parts)
	quota := quotas(l.total, members)

	heldBy := l.heldBy(prev, quota)
	// Keep up to the quota, in line order, cutting the last span kept.
	var kept []span
	need := make(map[string]uint64, len(members))
	for _, m := range members {
		left := quota[m.ID]
		spans := heldBy[m.ID]
		slices.SortFunc(spans, compareSpans)
		for _, sp := range spans {
			if left == 0 {
				break
			}
			if sp.hi-sp.lo > left {
				sp.hi = sp.lo + left
			}
			kept = append(kept, sp)
			left -= sp.hi - sp.lo
		}
		need[m.ID] = left
	}
	slices.SortFunc(kept, compareSpans)
	// prev comes from etcd and may overlap if it was damaged: trim overlaps
	// so that no hash has two owners; the trimmed part is needed again.
	trimmed := kept[:0]
	end := uint64(0)
	for _, sp := range kept {
		if sp.lo < end {
			cut := min(end, sp.hi) - sp.lo
			need[sp.owner] += cut
			sp.lo += cut
		}
		if sp.lo < sp.hi {
			trimmed = append(trimmed, sp)
			end = sp.hi
		}
	}
	kept = trimmed

	// The free parts of the line go to members below their quota: the member
	// whose kept span ends where a free part starts first (so shares stay
	// contiguous), then members in order.
	endsAt := make(map[uint64]string)
	for _, sp := range kept {
		endsAt[sp.hi] = sp.owner
	}
	all := slices.Clone(kept)
	at := uint64(0)
	next := 0 // first member that may still need space
	give := func(lo, hi uint64) {
		for lo < hi {
			id, ok := endsAt[lo]
			if !ok || need[id] == 0 {
				for next < len(members) && need[members[next].ID] == 0 {
					next++
				}
				id = members[next].ID
			}
			n := min(hi-lo, need[id])
			all = append(all, span{lo: lo, hi: lo + n, owner: id})
			need[id] -= n
			lo += n
			endsAt[lo] = id
		}
	}
	for _, sp := range kept {
		if sp.lo > at {
			give(at, sp.lo)
		}
		at = max(at, sp.hi)
	}
	if at < l.total {
		give(at, l.total)
	}
	slices.SortFunc(all, compareSpans)

	var out []Slice
	for _, sp := range all {
		for _, s := range l.toSlices(sp) {
			out = AppendJoined(out, s)
		}
	}
	return out
}

// AppendJoined appends s to out, or extends out's last slice when s
// continues it (same partition and owner, adjacent hashes), so that an
// owner's adjacent pieces come out as one range.
func AppendJoined(out []Slice, s Slice) []Slice {
	if n := len(out); n > 0 && out[n-1].TopicPartition == s.TopicPartition && out[n-1].Owner == s.Owner && out[n-1].Range.Hi == s.Range.Lo {
		out[n-1].Range.Hi = s.Range.Hi
		return out
	}
	return append(out, s)
}

// MaxWeight is the largest member weight (Config.Weight). A million to one is
// far more spread than capacities of real machines have, and with it the
// assignor's sums stay exact for any number of members. A registration with
// a larger weight is a damaged value (the leader does not count the member).
const MaxWeight = 1_000_000
