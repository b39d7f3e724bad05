package ledger

import (
	"fmt"
	"slices"
)

// Loss says which records of a range Kafka deleted (retention, or a
// DeleteRecords call) before the range had handled them. It is written to
// etcd in the same fenced transaction that moves the range's ledger past
// them, so a range never skips a record without saying so.
//
// A record at offset o whose key hashes to h is lost when Covers(o, h). The
// report is exact for the offsets the range knew were pending; for offsets it
// had not read yet it names the window only, because the keys of records
// nobody read are not known.
type Loss struct {
	// LogStart is the partition's first offset still in the log when the
	// loss was found: no lost record is at or above it.
	LogStart int64 `json:"log_start"`
	// Segments covers the parts of the range that lost records.
	Segments []LostSegment `json:"segments"`
}

// LostSegment is the loss of one part [Lo, Hi) of a range's hash space.
type LostSegment struct {
	Lo uint64 `json:"lo"`
	Hi uint64 `json:"hi"`
	// Pending are offsets below LogStart the range had read but not
	// handled (inherited from an earlier owner).
	Pending []int64 `json:"pending,omitempty"`
	// UnreadFrom is where the range had stopped reading: the records of
	// [UnreadFrom, LogStart) whose keys hash into [Lo, Hi) were never read.
	// Equal to LogStart when the range had read everything below it.
	UnreadFrom int64 `json:"unread_from"`
}

// Covers reports whether the loss includes the record at offset o with key
// hash h.
func (l Loss) Covers(o int64, h uint32) bool {
	for _, s := range l.Segments {
		if uint64(h) < s.Lo || uint64(h) >= s.Hi {
			continue
		}
		if o >= s.UnreadFrom && o < l.LogStart {
			return true
		}
		if _, ok := slices.BinarySearch(s.Pending, o); ok {
			return true
		}
	}
	return false
}

// Clip returns the part of the loss in the hash range r, and false if none
// of it is.
func (l Loss) Clip(r HashRange) (Loss, bool) {
	out := Loss{LogStart: l.LogStart}
	for _, s := range l.Segments {
		c := HashRange{Lo: s.Lo, Hi: s.Hi}.Intersect(r)
		if c.Empty() {
			continue
		}
		out.Segments = append(out.Segments, LostSegment{Lo: c.Lo, Hi: c.Hi, Pending: s.Pending, UnreadFrom: s.UnreadFrom})
	}
	return out, len(out.Segments) > 0
}

// Known is the number of lost offsets the range knew were pending.
func (l Loss) Known() int {
	n := 0
	for _, s := range l.Segments {
		n += len(s.Pending)
	}
	return n
}

// Window is the lowest lost offset (or unread offset) of the loss: every
// lost record is in [Window(), LogStart).
func (l Loss) Window() int64 {
	w := l.LogStart
	for _, s := range l.Segments {
		w = min(w, s.UnreadFrom)
		if len(s.Pending) > 0 {
			w = min(w, s.Pending[0])
		}
	}
	return w
}

// Truncate moves the state past every record below logStart that it has not
// handled and that is not in flight here: those records are no longer in
// Kafka and can never run. It returns what was lost, and false when nothing
// was (the range had handled everything below logStart). Records in flight
// here are kept: they were fetched before the deletion and will complete.
func (st *State) Truncate(logStart int64) (Loss, bool) {
	loss := Loss{LogStart: logStart}
	for i := range st.segs {
		s := &st.segs[i]
		ls := LostSegment{Lo: s.lo, Hi: s.hi, UnreadFrom: logStart}
		if s.next < logStart {
			ls.UnreadFrom = s.next
			s.next = logStart
		}
		s.pending.each(func(o int64, f uint8, _ uint32) {
			if o < logStart && f == waiting {
				ls.Pending = append(ls.Pending, o)
			}
		})
		for _, o := range ls.Pending {
			s.pending.remove(o)
		}
		if len(ls.Pending) > 0 || ls.UnreadFrom < logStart {
			loss.Segments = append(loss.Segments, ls)
		}
	}
	if len(loss.Segments) == 0 {
		return Loss{}, false
	}
	st.version++
	if len(st.segs) > 1 {
		st.mergeEqual()
	}
	return loss, true
}

// Check reports whether l is consistent: segments inside the hash space,
// windows below the log start, pending offsets sorted and below it.
func (l Loss) Check() error {
	for _, seg := range l.Segments {
		if seg.Lo >= seg.Hi || seg.Hi > HashSpace || seg.UnreadFrom < 0 || seg.UnreadFrom > l.LogStart ||
			!slices.IsSorted(seg.Pending) || (len(seg.Pending) > 0 && (seg.Pending[0] < 0 || seg.Pending[len(seg.Pending)-1] >= l.LogStart)) {
			return fmt.Errorf("inconsistent lost segment %+v (log start %d)", seg, l.LogStart)
		}
	}
	return nil
}
