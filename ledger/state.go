package ledger

import "fmt"

// Verdict says what the owner of a range does with a fetched record.
type Verdict uint8

const (
	// Run: the record is in the range and not done; hand it to a worker and
	// call Complete when it is handled.
	Run Verdict = iota + 1
	// Skip: the record is in the range and already done, by this owner or a
	// previous one.
	Skip
	// InFlight: the record is in the range and already handed to a worker in
	// this process (it was delivered again after a seek).
	InFlight
	// Pass: the record's hash is outside the range; it counts as handled.
	Pass
)

func (v Verdict) String() string {
	switch v {
	case Run:
		return "run"
	case Skip:
		return "skip"
	case InFlight:
		return "in-flight"
	case Pass:
		return "pass"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// State is the in-memory completion state of one owned range. It is what an
// owner updates per record; Entry() gives the form stored in etcd. A State is
// not safe for concurrent use.
//
// Each pending offset also remembers whether it has been handed to a worker in
// this process. That makes re-delivery harmless: after the owner seeks a
// partition back (because it gained a range with a lower watermark), a record
// already in flight is not run a second time, and one inherited as pending is
// run exactly once.
type State struct {
	r       HashRange
	segs    []segment
	version uint64
}

type segment struct {
	lo, hi  uint64
	next    int64
	pending pendingSet
}

func (s *segment) contains(h uint32) bool { return uint64(h) >= s.lo && uint64(h) < s.hi }

func (s *segment) watermark() int64 {
	if m, ok := s.pending.min(); ok && m < s.next {
		return m
	}
	return s.next
}

// NewState starts the in-memory state of range r from its stored entry. An
// entry without state starts at offset start, the first offset the range has
// not handled (the group's committed offset for a new group). Inherited
// pending offsets wait to be run again.
func NewState(r HashRange, e Entry, start int64) (*State, error) {
	if err := e.Validate(r); err != nil {
		return nil, err
	}
	st := &State{r: r}
	if !e.Initialized() {
		if start < 0 {
			return nil, fmt.Errorf("ledger: start offset %d for range %s is negative", start, r)
		}
		st.segs = []segment{{lo: r.Lo, hi: r.Hi, next: start}}
		return st, nil
	}
	for _, s := range e.Segments {
		seg := segment{lo: s.Lo, hi: s.Hi, next: s.Next}
		for _, o := range s.Pending {
			seg.pending.add(o, waiting, 0)
		}
		st.segs = append(st.segs, seg)
	}
	return st, nil
}

// Range is the hash range the state covers.
func (st *State) Range() HashRange { return st.r }

// Version grows with every change; an owner compares it with the version it
// last flushed to know whether the entry is dirty.
func (st *State) Version() uint64 { return st.version }

// Observe takes the fetched record at offset o with key hash h. Records of one
// partition must be observed in ascending offset order, except that after a
// seek the fetcher may deliver again from any offset at or above
// Watermark(); such re-deliveries are answered Skip or InFlight and change
// nothing.
func (st *State) Observe(o int64, h uint32) (Verdict, error) {
	if o < 0 {
		return 0, &OffsetError{Op: "observe", Offset: o, Reason: "negative offset from the fetcher"}
	}
	verdict := Pass
	changed := false
	for i := range st.segs {
		s := &st.segs[i]
		if s.contains(h) {
			if o >= s.next {
				s.pending.add(o, dispatched, h)
				s.next = o + 1
				verdict, changed = Run, true
				continue
			}
			switch idx, flag := s.pending.lookup(o); flag {
			case waiting:
				s.pending.flags[idx], s.pending.hashes[idx] = dispatched, h
				verdict = Run
			case dispatched:
				verdict = InFlight
			default:
				verdict = Skip
			}
			continue
		}
		// Not this segment's hash: the record is handled as far as the
		// segment is concerned.
		if o >= s.next {
			s.next = o + 1
			changed = true
		} else if s.pending.remove(o) {
			changed = true
		}
	}
	if changed {
		st.version++
		if len(st.segs) > 1 {
			st.mergeEqual()
		}
	}
	return verdict, nil
}

// Complete records that the record at offset o with key hash h, for which
// Observe said Run, has been handled.
func (st *State) Complete(o int64, h uint32) error {
	for i := range st.segs {
		s := &st.segs[i]
		if !s.contains(h) {
			continue
		}
		idx, flag := s.pending.lookup(o)
		if flag != dispatched {
			return &OffsetError{Op: "complete", Offset: o, Reason: "not in flight for this range (never fetched, or completed already)", Err: ErrNotDispatched}
		}
		s.pending.removeAt(idx)
		st.version++
		return nil
	}
	return &OffsetError{Op: "complete", Offset: o, Reason: fmt.Sprintf("hash %d is outside range %s", h, st.r), Err: ErrNotDispatched}
}

// Watermark is the lowest offset of the range that may not be done; every
// record of the range below it is handled.
func (st *State) Watermark() int64 {
	w := st.segs[0].watermark()
	for i := 1; i < len(st.segs); i++ {
		w = min(w, st.segs[i].watermark())
	}
	return w
}

// Pending is the number of pending offsets (in flight here, or inherited and
// not yet run).
func (st *State) Pending() int {
	n := 0
	for i := range st.segs {
		n += st.segs[i].pending.len()
	}
	return n
}

// Oldest returns the lowest pending offset, if any.
func (st *State) Oldest() (int64, bool) {
	var best int64
	found := false
	for i := range st.segs {
		if m, ok := st.segs[i].pending.min(); ok && (!found || m < best) {
			best, found = m, true
		}
	}
	return best, found
}

// Entry returns the state in its stored form.
func (st *State) Entry() Entry {
	e := Entry{Segments: make([]Segment, len(st.segs))}
	for i := range st.segs {
		s := &st.segs[i]
		e.Segments[i] = Segment{Lo: s.lo, Hi: s.hi, Next: s.next, Pending: s.pending.list()}
	}
	return e
}

// Clip returns the state of the sub-range r (which must lie inside the
// state's range), for an owner that keeps only part of a range. A pending
// offset in flight here stays with the part its hash is in; an inherited one,
// whose hash is not known, stays in every part until it is fetched.
func (st *State) Clip(r HashRange) *State {
	out := &State{r: r, version: st.version}
	for i := range st.segs {
		s := &st.segs[i]
		c := HashRange{Lo: s.lo, Hi: s.hi}.Intersect(r)
		if c.Empty() {
			continue
		}
		p := s.pending.filter(func(_ int64, f uint8, h uint32) bool {
			return f == waiting || c.Contains(h)
		})
		out.segs = append(out.segs, segment{lo: c.Lo, hi: c.Hi, next: s.next, pending: p})
	}
	return out
}

// Concat joins st with o, the state of the range right after st's.
func (st *State) Concat(o *State) (*State, error) {
	if st.r.Hi != o.r.Lo {
		return nil, fmt.Errorf("ledger: cannot join %s and %s: not adjacent", st.r, o.r)
	}
	out := &State{r: HashRange{Lo: st.r.Lo, Hi: o.r.Hi}, version: st.version + o.version + 1}
	out.segs = append(append(out.segs, st.segs...), o.segs...)
	out.mergeEqual()
	return out, nil
}

// mergeEqual merges neighbouring segments whose next is equal and whose
// pending offsets merge exactly (see exactUnion), once the owner has fetched
// past the state each part inherited.
func (st *State) mergeEqual() {
	out := st.segs[:1]
	for i := 1; i < len(st.segs); i++ {
		s, last := &st.segs[i], &out[len(out)-1]
		if s.next != last.next || !exactUnion(&last.pending, &s.pending) {
			out = append(out, *s)
			continue
		}
		var p pendingSet
		a, b := last.pending.entries(), s.pending.entries()
		for len(a) > 0 || len(b) > 0 {
			if len(a) > 0 && len(b) > 0 && a[0].o == b[0].o {
				// One offset in both parts: an inherited offset
				// over-approximated in each, or dispatched in the part
				// its hash is in. Keep the dispatched one.
				e := a[0]
				if b[0].f > e.f {
					e = b[0]
				}
				p.add(e.o, e.f, e.h)
				a, b = a[1:], b[1:]
				continue
			}
			if len(b) == 0 || (len(a) > 0 && a[0].o < b[0].o) {
				p.add(a[0].o, a[0].f, a[0].h)
				a = a[1:]
				continue
			}
			p.add(b[0].o, b[0].f, b[0].h)
			b = b[1:]
		}
		last.hi, last.pending = s.hi, p
	}
	st.segs = out
}

// exactUnion reports whether the union of two neighbouring segments' pending
// offsets says exactly what the two say apart. An offset in flight has a known
// hash, so it belongs to its own part and the other part's silence about it
// means nothing. An offset waiting in one part only is different: its hash is
// unknown, the other part may hold that hash and have completed the record,
// and the union would run the record again. Such segments stay apart until
// the fetcher has delivered the offset again.
func exactUnion(a, b *pendingSet) bool {
	i, j := a.head, b.head
	for {
		for i < len(a.offs) && a.flags[i] == gone {
			i++
		}
		for j < len(b.offs) && b.flags[j] == gone {
			j++
		}
		switch {
		case i == len(a.offs) && j == len(b.offs):
			return true
		case j == len(b.offs) || (i < len(a.offs) && a.offs[i] < b.offs[j]):
			if a.flags[i] == waiting {
				return false
			}
			i++
		case i == len(a.offs) || b.offs[j] < a.offs[i]:
			if b.flags[j] == waiting {
				return false
			}
			j++
		default: // in both
			i++
			j++
		}
	}
}
