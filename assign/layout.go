package assign

import (
	"cmp"
	"slices"
)

// The contiguous layout: every member one span of the line.
//
// Assign moves the least hash space it can, and pays for it in fragments:
// when a member joins, each of the M others gives up a sliver at the end of
// its share, so the newcomer gets M slivers scattered over the line, and the
// fragments add up with every join (65 members joining one partition one by
// one left 853 ranges). Fragments cost every member per record (each fetched
// record is observed by every owned range of its partition) and in reads
// (a member with slivers in many partitions fetches them all).
//
// AssignContiguous gives every member one span of the line instead, so a
// partition has as many ranges as owners once merged (merge.go) and the reads
// are at most P + M − 1. It keeps the members in the order of their current
// holdings and puts newcomers where the most hash space stays put; it moves
// more than Assign (about a quarter of the line on a join, against
// 1/(M+1)), so the leader uses it only to settle: when the group has no
// handoff under way and Assign's answer is more fragmented than a
// contiguous one (coord/internal/plan's useContiguous).

// AssignContiguous computes an assignment in which every member owns one
// contiguous span of the line of partitions (see Assign), each share within
// one hash of its weighted ideal as in Assign. Members keep the order of the
// hash space they hold in prev; members that hold nothing are placed together
// where the layout keeps most of prev in place. With no more members than
// partitions it is Assign (whole partitions are contiguous already).
//
// Length: one layout (anchor the members that hold something, choose where
// the newcomers' block goes, lay the spans end to end) whose steps share
// the line, the quotas, the holdings and the anchored order; cut, each
// would take most of them.
func AssignContiguous(parts []PartitionWeight, members []MemberWeight, prev []Slice) []Slice {
	if len(members) == 0 || len(parts) == 0 {
		return nil
	}
	parts, members = sortedUnique(parts, members)
	if len(members) <= len(parts) {
		return assignWhole(parts, members, prev)
	}
	l := newLine(parts)
	quota := quotas(l.total, members)

	heldBy := l.heldBy(prev, quota)
	// Each member that holds something is anchored at the start of its
	// largest span; the others are newcomers.
	type anchored struct {
		id string
		at uint64
	}
	var order []anchored
	var newcomers []string
	var newLen uint64
	for _, m := range members {
		spans := heldBy[m.ID]
		if len(spans) == 0 {
			newcomers = append(newcomers, m.ID)
			newLen += quota[m.ID]
			continue
		}
		best := spans[0]
		for _, sp := range spans[1:] {
			if n, b := sp.hi-sp.lo, best.hi-best.lo; n > b || (n == b && sp.lo < best.lo) {
				best = sp
			}
		}
		order = append(order, anchored{m.ID, best.lo})
	}
	slices.SortStableFunc(order, func(a, b anchored) int { return cmp.Compare(a.at, b.at) })

	// kept is how much of member id's prev lies in [lo, lo+quota).
	kept := func(id string, lo uint64) uint64 {
		hi := lo + quota[id]
		var n uint64
		for _, sp := range heldBy[id] {
			if a, b := max(sp.lo, lo), min(sp.hi, hi); a < b {
				n += b - a
			}
		}
		return n
	}
	// The newcomers go in as one block at index k of order: members before
	// it stay where the cumulative quotas put them, members after it shift
	// by the block's length. Pick the k that keeps the most.
	before := make([]uint64, len(order)+1) // kept by order[:i], unshifted
	after := make([]uint64, len(order)+1)  // kept by order[i:], shifted
	at := uint64(0)
	for i, a := range order {
		before[i+1] = before[i] + kept(a.id, at)
		at += quota[a.id]
	}
	for i := len(order) - 1; i >= 0; i-- {
		at -= quota[order[i].id]
		after[i] = after[i+1] + kept(order[i].id, at+newLen)
	}
	best := 0
	for k := range len(order) + 1 {
		if before[k]+after[k] > before[best]+after[best] {
			best = k
		}
	}
	ids := make([]string, 0, len(members))
	for _, a := range order[:best] {
		ids = append(ids, a.id)
	}
	ids = append(ids, newcomers...)
	for _, a := range order[best:] {
		ids = append(ids, a.id)
	}

	var out []Slice
	at = 0
	for _, id := range ids {
		sp := span{lo: at, hi: at + quota[id], owner: id}
		at = sp.hi
		if sp.lo == sp.hi {
			continue
		}
		for _, s := range l.toSlices(sp) {
			out = AppendJoined(out, s)
		}
	}
	return out
}
