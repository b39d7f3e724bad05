package ledger

import (
	"slices"
	"sort"
)

// Skip records that the partition holds no record at the offsets [from, to)
// for the reader: the fetcher, reading from offset from, delivered nothing
// below to. Such offsets are transaction markers, records of aborted
// transactions (under read_committed), and records removed by compaction;
// they count as handled, since there is nothing to handle.
//
// Each segment that had read up to from (next in [from, to]) moves its next
// to to. Pending offsets in [from, to) that wait to be run again (inherited,
// or left by a failed attempt) are dropped, since their record is gone; they
// are returned, in ascending order, so the caller can say so. Offsets in
// flight here are kept: their record was fetched and will complete. An
// offset in flight in one part and waiting in another (inherited by a part
// whose hashes never held its record) loses the waiting copy only, and is
// not returned: its record is not gone. A segment whose next is below from
// is left as it is: nothing says the offsets [next, from) are absent. Skip
// never moves next backwards.
func (st *State) Skip(from, to int64) (dropped []int64) {
	if from < 0 || to <= from {
		return nil
	}
	changed := false
	for i := range st.segs {
		s := &st.segs[i]
		if s.next >= from && s.next < to {
			s.next = to
			changed = true
		}
		if d := s.pending.dropWaiting(from, to); len(d) > 0 {
			dropped = append(dropped, d...)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	st.version++
	if len(st.segs) > 1 {
		// An inherited offset waiting in several parts is dropped from
		// each: keep one copy of it in the report.
		slices.Sort(dropped)
		dropped = slices.Compact(dropped)
		dropped = slices.DeleteFunc(dropped, st.inFlight)
		st.mergeEqual()
	}
	if len(dropped) == 0 {
		return nil
	}
	return dropped
}

// dropWaiting removes the waiting offsets in [from, to) and returns them.
func (p *pendingSet) dropWaiting(from, to int64) []int64 {
	tail := p.offs[p.head:]
	i := p.head + sort.Search(len(tail), func(i int) bool { return tail[i] >= from })
	var out []int64
	for ; i < len(p.offs) && p.offs[i] < to; i++ {
		if p.flags[i] == waiting {
			out = append(out, p.offs[i])
		}
	}
	for _, o := range out {
		p.remove(o)
	}
	return out
}
