package ledger

import "slices"

// Flags of a pending offset.
const (
	gone       uint8 = iota // completed or dropped; a tombstone until compaction
	waiting                 // pending, not handed to a worker in this process
	dispatched              // pending and handed to a worker: in flight here
)

// pendingSet is an ordered set of pending offsets. Offsets are appended in
// ascending order (the fetcher delivers a partition in order, and a new
// pending offset is always at or above next, above every offset already
// here), so adding is an append. Removal marks a tombstone; the front is
// trimmed at once and the slices are compacted when tombstones (trimmed or
// not) outnumber live entries, so memory stays within about twice the live
// count and every operation is amortized O(1) or O(log n). The slices are
// reused, so the steady path does not allocate.
type pendingSet struct {
	offs   []int64
	flags  []uint8
	hashes []uint32 // key hash of a dispatched offset; 0 and unused for waiting ones
	head   int      // offs[:head] are all gone
	live   int
}

func (p *pendingSet) len() int { return p.live }

// add appends o, which must be greater than every offset in the set.
func (p *pendingSet) add(o int64, flag uint8, h uint32) {
	p.offs = append(p.offs, o)
	p.flags = append(p.flags, flag)
	p.hashes = append(p.hashes, h)
	p.live++
}

// find returns the index of o and whether it is live. Where no offset is
// missing between the front and o (the range holds every record of its
// partition there, and no compaction took entries out), o is at its
// distance from the front, which is tried first; else a binary search
// finds it. Every handled record is looked up here when it completes.
func (p *pendingSet) find(o int64) (int, bool) {
	tail := p.offs[p.head:]
	if len(tail) == 0 {
		return -1, false
	}
	var i int
	var found bool
	if d := o - tail[0]; d >= 0 && d < int64(len(tail)) && tail[d] == o {
		i, found = int(d), true
	} else {
		i, found = slices.BinarySearch(tail, o)
	}
	if found && p.flags[p.head+i] != gone {
		return p.head + i, true
	}
	return -1, false
}

// lookup returns the index and flag of o; the flag is gone when o is absent.
func (p *pendingSet) lookup(o int64) (int, uint8) {
	if i, ok := p.find(o); ok {
		return i, p.flags[i]
	}
	return -1, gone
}

// remove drops o if present, reporting whether it was.
func (p *pendingSet) remove(o int64) bool {
	i, ok := p.find(o)
	if ok {
		p.removeAt(i)
	}
	return ok
}

// removeAt drops the live entry at index i (find's).
func (p *pendingSet) removeAt(i int) {
	p.flags[i] = gone
	p.live--
	for p.head < len(p.offs) && p.flags[p.head] == gone {
		p.head++
	}
	switch {
	case p.live == 0:
		p.offs, p.flags, p.hashes, p.head = p.offs[:0], p.flags[:0], p.hashes[:0], 0
	case len(p.offs) > 2*p.live+64: // counting the trimmed front, which append would otherwise keep forever
		p.compact()
	}
}

// compact moves the live entries to the front of the slices.
func (p *pendingSet) compact() {
	n := 0
	for i := p.head; i < len(p.offs); i++ {
		if p.flags[i] != gone {
			p.offs[n], p.flags[n], p.hashes[n] = p.offs[i], p.flags[i], p.hashes[i]
			n++
		}
	}
	p.offs, p.flags, p.hashes, p.head = p.offs[:n], p.flags[:n], p.hashes[:n], 0
}

// min returns the lowest live offset.
func (p *pendingSet) min() (int64, bool) {
	if p.live == 0 {
		return 0, false
	}
	return p.offs[p.head], true
}

// each calls fn for every live offset in ascending order.
func (p *pendingSet) each(fn func(o int64, flag uint8, h uint32)) {
	for i := p.head; i < len(p.offs); i++ {
		if p.flags[i] != gone {
			fn(p.offs[i], p.flags[i], p.hashes[i])
		}
	}
}

// list returns the live offsets in ascending order (nil when empty).
func (p *pendingSet) list() []int64 {
	if p.live == 0 {
		return nil
	}
	out := make([]int64, 0, p.live)
	p.each(func(o int64, _ uint8, _ uint32) { out = append(out, o) })
	return out
}

// filter returns a copy holding the live offsets for which keep is true.
func (p *pendingSet) filter(keep func(o int64, flag uint8, h uint32) bool) pendingSet {
	var c pendingSet
	p.each(func(o int64, f uint8, h uint32) {
		if keep(o, f, h) {
			c.add(o, f, h)
		}
	})
	return c
}

type pendingEntry struct {
	o int64
	f uint8
	h uint32
}

// entries returns the live entries in ascending order.
func (p *pendingSet) entries() []pendingEntry {
	out := make([]pendingEntry, 0, p.live)
	p.each(func(o int64, f uint8, h uint32) { out = append(out, pendingEntry{o, f, h}) })
	return out
}
