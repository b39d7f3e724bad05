package ledger

import (
	"fmt"
	"slices"
)

// Segment is the completion state of a part of a range's hash space: every
// record with a key hash in [Lo, Hi) and an offset below Next has been handled,
// except the offsets in Pending. A record whose hash is outside [Lo, Hi)
// counts as handled for the segment as soon as it has been fetched.
//
// Pending may hold offsets whose record hashes elsewhere: when a range is
// split, each part inherits the whole pending list (the ledger does not store
// hashes). Such an offset is dropped the first time the new owner fetches it.
// Over-approximating pending only holds the watermark back; it never marks an
// unfinished record done.
type Segment struct {
	Lo      uint64  `json:"lo"`
	Hi      uint64  `json:"hi"`
	Next    int64   `json:"next"`
	Pending []int64 `json:"pending,omitempty"`
}

// Range returns the segment's hash range.
func (s Segment) Range() HashRange { return HashRange{Lo: s.Lo, Hi: s.Hi} }

// Watermark is the lowest offset of the segment that may not be done:
// min(Pending ∪ {Next}).
func (s Segment) Watermark() int64 {
	if len(s.Pending) > 0 && s.Pending[0] < s.Next {
		return s.Pending[0]
	}
	return s.Next
}

// Done reports whether the record at offset o with key hash h is handled
// according to the segment. A hash outside the segment is never its concern.
func (s Segment) Done(o int64, h uint32) bool {
	if !s.Range().Contains(h) {
		return false
	}
	if o >= s.Next {
		return false
	}
	_, found := slices.BinarySearch(s.Pending, o)
	return !found
}

// Entry is the stored completion state of one range: segments that cover the
// range's hash space in order, without gap or overlap. An entry without
// segments has no state yet: its owner starts from the group's committed
// offset (see the consumer package).
//
// An entry has several segments only after ranges moved: each part keeps the
// state its previous owner left, until the new owner has fetched past all of
// them and they merge.
type Entry struct {
	Segments []Segment `json:"segments"`
}

// Initialized reports whether the entry holds state.
func (e Entry) Initialized() bool { return len(e.Segments) > 0 }

// Watermark is the lowest offset that may not be done for the range, and false
// for an entry without state.
func (e Entry) Watermark() (int64, bool) {
	if !e.Initialized() {
		return 0, false
	}
	w := e.Segments[0].Watermark()
	for _, s := range e.Segments[1:] {
		w = min(w, s.Watermark())
	}
	return w, true
}

// PendingCount is the number of pending offsets over all segments.
func (e Entry) PendingCount() int {
	n := 0
	for _, s := range e.Segments {
		n += len(s.Pending)
	}
	return n
}

// Done reports whether the record at offset o with key hash h was handled
// according to the entry. This is the filter a new owner applies to what it
// inherits: nothing it says is done was left unfinished by a previous owner.
func (e Entry) Done(o int64, h uint32) bool {
	for _, s := range e.Segments {
		if s.Range().Contains(h) {
			return s.Done(o, h)
		}
	}
	return false
}

// Validate checks that the entry is well formed for range r: segments sorted,
// adjacent and covering r exactly; offsets non-negative; pending strictly
// ascending and below next.
func (e Entry) Validate(r HashRange) error {
	if err := r.Valid(); err != nil {
		return err
	}
	if !e.Initialized() {
		return nil
	}
	at := r.Lo
	for i, s := range e.Segments {
		if s.Lo != at {
			return fmt.Errorf("segment %d starts at hash %d, want %d (segments must cover the range %s in order without gap or overlap)", i, s.Lo, at, r)
		}
		if s.Hi <= s.Lo {
			return fmt.Errorf("segment %d: empty hash range [%d,%d)", i, s.Lo, s.Hi)
		}
		at = s.Hi
		if s.Next < 0 {
			return fmt.Errorf("segment %d: negative next offset %d", i, s.Next)
		}
		for j, o := range s.Pending {
			switch {
			case o < 0:
				return fmt.Errorf("segment %d: negative pending offset %d", i, o)
			case o >= s.Next:
				return fmt.Errorf("segment %d: pending offset %d is not below next %d", i, o, s.Next)
			case j > 0 && o <= s.Pending[j-1]:
				return fmt.Errorf("segment %d: pending offsets not strictly ascending (%d after %d)", i, o, s.Pending[j-1])
			}
		}
	}
	if at != r.Hi {
		return fmt.Errorf("segments end at hash %d, want %d (they must cover the range %s)", at, r.Hi, r)
	}
	return nil
}

// Clip returns the state of the sub-range r of the entry's range: each
// segment cut to r, keeping its next and its whole pending list (see Segment
// for why that is safe). r must lie inside the entry's range.
func (e Entry) Clip(r HashRange) Entry {
	if !e.Initialized() {
		return Entry{}
	}
	var out Entry
	for _, s := range e.Segments {
		c := s.Range().Intersect(r)
		if c.Empty() {
			continue
		}
		out.Segments = append(out.Segments, Segment{Lo: c.Lo, Hi: c.Hi, Next: s.Next, Pending: slices.Clone(s.Pending)})
	}
	return out
}

// Concat returns the state of two adjacent ranges joined: e's range followed
// by o's. Both must hold state.
func (e Entry) Concat(o Entry) Entry {
	segs := make([]Segment, 0, len(e.Segments)+len(o.Segments))
	segs = append(segs, e.Segments...)
	segs = append(segs, o.Segments...)
	return Entry{Segments: normalize(segs)}
}

// normalize merges neighbouring segments that have the same next and the
// same pending list. Equal lists are required: an offset pending in one part
// only may be an over-approximation there (inherited from a split) while the
// other part, which holds the record's hash, has completed it; merging would
// widen the pending claim to that hash and run the record again.
func normalize(segs []Segment) []Segment {
	out := segs[:0:0]
	for _, s := range segs {
		if n := len(out); n > 0 && out[n-1].Next == s.Next && out[n-1].Hi == s.Lo && slices.Equal(out[n-1].Pending, s.Pending) {
			out[n-1].Hi = s.Hi
			out[n-1].Pending = unionSorted(out[n-1].Pending, s.Pending)
			continue
		}
		out = append(out, s)
	}
	return out
}

func unionSorted(a, b []int64) []int64 {
	if len(b) == 0 {
		return a
	}
	if len(a) == 0 {
		return slices.Clone(b)
	}
	out := make([]int64, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default: // equal
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}
