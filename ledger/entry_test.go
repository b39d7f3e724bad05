package ledger_test

import (
	"strings"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

func seg(lo, hi uint64, next int64, pending ...int64) ledger.Segment {
	return ledger.Segment{Lo: lo, Hi: hi, Next: next, Pending: pending}
}

func entry(segs ...ledger.Segment) ledger.Entry { return ledger.Entry{Segments: segs} }

// mustEqual fails unless the entries are equal (nil and empty pending lists
// alike).
func mustEqual(t *testing.T, what string, got, want ledger.Entry) {
	t.Helper()
	if !entriesEqual(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestSegment(t *testing.T) {
	s := seg(100, 200, 50, 10, 20)
	for _, tc := range []struct {
		o    int64
		h    uint32
		done bool
	}{
		{5, 150, true},    // below next, not pending
		{10, 150, false},  // pending
		{20, 150, false},  // pending
		{21, 150, true},   // between pending offsets
		{49, 150, true},   // just below next
		{50, 150, false},  // next
		{900, 150, false}, // far above
		{5, 99, false},    // hash below the segment: not its concern
		{5, 200, false},   // hash at hi: outside
		{5, 100, true},    // hash at lo: inside
	} {
		if got := s.Done(tc.o, tc.h); got != tc.done {
			t.Errorf("%v.Done(%d, %d) = %v, want %v", s, tc.o, tc.h, got, tc.done)
		}
	}
	for _, tc := range []struct {
		s    ledger.Segment
		want int64
	}{
		{seg(0, 1, 50), 50},
		{seg(0, 1, 50, 10, 20), 10},
		{seg(0, 1, 0), 0},
	} {
		if got := tc.s.Watermark(); got != tc.want {
			t.Errorf("%v.Watermark() = %d, want %d", tc.s, got, tc.want)
		}
	}
	if r := s.Range(); r != hr(100, 200) {
		t.Errorf("Range() = %s", r)
	}
}

func TestEntryAccessors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		e       ledger.Entry
		init    bool
		w       int64
		pending int
	}{
		{"no state", ledger.Entry{}, false, 0, 0},
		{"one segment", entry(seg(0, top, 10)), true, 10, 0},
		{"one segment with pending", entry(seg(0, top, 10, 3, 7)), true, 3, 2},
		{"lowest over segments", entry(seg(0, 5, 10, 8), seg(5, top, 4)), true, 4, 1},
		{"lowest is a pending", entry(seg(0, 5, 10, 2), seg(5, top, 4, 3)), true, 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.e.Initialized() != tc.init {
				t.Errorf("Initialized() = %v", tc.e.Initialized())
			}
			w, ok := tc.e.Watermark()
			if ok != tc.init || w != tc.w {
				t.Errorf("Watermark() = %d, %v; want %d, %v", w, ok, tc.w, tc.init)
			}
			if got := tc.e.PendingCount(); got != tc.pending {
				t.Errorf("PendingCount() = %d, want %d", got, tc.pending)
			}
		})
	}
}

func TestEntryDone(t *testing.T) {
	e := entry(seg(0, 100, 50, 10), seg(100, top, 20))
	for _, tc := range []struct {
		name string
		o    int64
		h    uint32
		want bool
	}{
		{"first segment done", 5, 50, true},
		{"first segment pending", 10, 50, false},
		{"first segment at next", 50, 50, false},
		{"second segment done", 10, 100, true},
		{"second segment above its next", 30, 100, false},
		{"last hash", 19, 1<<32 - 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := e.Done(tc.o, tc.h); got != tc.want {
				t.Fatalf("Done(%d, %d) = %v, want %v", tc.o, tc.h, got, tc.want)
			}
		})
	}
	t.Run("no state", func(t *testing.T) {
		if (ledger.Entry{}).Done(0, 0) {
			t.Fatal("an entry without state says a record is done")
		}
	})
	t.Run("hash outside the range", func(t *testing.T) {
		if entry(seg(10, 20, 100)).Done(1, 5) {
			t.Fatal("Done for a hash outside every segment")
		}
	})
}

func TestEntryValidate(t *testing.T) {
	r := hr(100, 200)
	for _, tc := range []struct {
		name    string
		r       ledger.HashRange
		e       ledger.Entry
		wantErr string // "" for valid
	}{
		{"no state", r, ledger.Entry{}, ""},
		{"one segment", r, entry(seg(100, 200, 5, 1, 3)), ""},
		{"two segments", r, entry(seg(100, 150, 5), seg(150, 200, 9, 8)), ""},
		{"next zero", r, entry(seg(100, 200, 0)), ""},
		{"full space", ledger.Full, entry(seg(0, top, 1)), ""},
		{"invalid range", hr(5, 5), ledger.Entry{}, "want lo < hi"},
		{"range past the space", hr(0, top+1), entry(seg(0, top+1, 1)), "want lo < hi"},
		{"gap at start", r, entry(seg(101, 200, 5)), "segment 0 starts at hash 101, want 100"},
		{"gap between", r, entry(seg(100, 150, 5), seg(151, 200, 5)), "segment 1 starts at hash 151, want 150"},
		{"overlap", r, entry(seg(100, 150, 5), seg(149, 200, 5)), "segment 1 starts at hash 149, want 150"},
		{"out of order", r, entry(seg(150, 200, 5), seg(100, 150, 5)), "segment 0 starts at hash 150"},
		{"empty segment", r, entry(seg(100, 100, 5), seg(100, 200, 5)), "segment 0: empty hash range"},
		{"reversed segment", r, entry(seg(100, 90, 5)), "segment 0: empty hash range"},
		{"short of hi", r, entry(seg(100, 199, 5)), "segments end at hash 199, want 200"},
		{"past hi", r, entry(seg(100, 201, 5)), "segments end at hash 201, want 200"},
		{"negative next", r, entry(seg(100, 200, -1)), "negative next offset -1"},
		{"negative pending", r, entry(seg(100, 200, 5, -2, 1)), "negative pending offset -2"},
		{"pending at next", r, entry(seg(100, 200, 5, 5)), "pending offset 5 is not below next 5"},
		{"pending above next", r, entry(seg(100, 200, 5, 1, 9)), "pending offset 9 is not below next 5"},
		{"pending unsorted", r, entry(seg(100, 200, 9, 3, 1)), "not strictly ascending (1 after 3)"},
		{"pending duplicate", r, entry(seg(100, 200, 9, 3, 3)), "not strictly ascending (3 after 3)"},
		{"error in second segment", r, entry(seg(100, 150, 5), seg(150, 200, 5, 7)), "segment 1: pending offset 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.e.Validate(tc.r)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate(%s) of %v: %v", tc.r, tc.e, err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Validate(%s) of %v = nil, want an error containing %q", tc.r, tc.e, tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Validate(%s) of %v = %q, want it to contain %q", tc.r, tc.e, err, tc.wantErr)
			}
		})
	}
}

func TestEntryClip(t *testing.T) {
	e := entry(seg(0, 100, 50, 10, 40), seg(100, 200, 60, 55))
	for _, tc := range []struct {
		name string
		r    ledger.HashRange
		want ledger.Entry
	}{
		{"whole", hr(0, 200), e},
		{"inside the first segment", hr(20, 30), entry(seg(20, 30, 50, 10, 40))},
		{"first segment exactly", hr(0, 100), entry(seg(0, 100, 50, 10, 40))},
		{"across the boundary", hr(90, 110), entry(seg(90, 100, 50, 10, 40), seg(100, 110, 60, 55))},
		{"second segment end", hr(199, 200), entry(seg(199, 200, 60, 55))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e.Clip(tc.r)
			mustEqual(t, "Clip("+tc.r.String()+")", got, tc.want)
			if err := got.Validate(tc.r); err != nil {
				t.Fatalf("Clip(%s) = %v: %v", tc.r, got, err)
			}
		})
	}
	t.Run("no state", func(t *testing.T) {
		if got := (ledger.Entry{}).Clip(hr(0, 5)); got.Initialized() {
			t.Fatalf("Clip of an entry without state = %v", got)
		}
	})
	t.Run("copies pending", func(t *testing.T) {
		c := e.Clip(hr(0, 10))
		c.Segments[0].Pending[0] = 999
		if e.Segments[0].Pending[0] != 10 {
			t.Fatal("changing a clipped entry changed the original")
		}
	})
	t.Run("never marks a pending record done", func(t *testing.T) {
		// The ledger does not store hashes: each part keeps every
		// pending offset of the segment it was cut from.
		for _, r := range []ledger.HashRange{hr(0, 50), hr(50, 100), hr(0, 1)} {
			c := e.Clip(r)
			for _, o := range []int64{10, 40} {
				if c.Done(o, uint32(r.Lo)) {
					t.Fatalf("Clip(%s).Done(%d) = true; %d is pending in the whole", r, o, o)
				}
			}
		}
	})
}

func TestEntryConcat(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b ledger.Entry
		want ledger.Entry
	}{
		{
			"different next stay apart",
			entry(seg(0, 10, 5)), entry(seg(10, 20, 7)),
			entry(seg(0, 10, 5), seg(10, 20, 7)),
		},
		{
			"same next, no pending: merged",
			entry(seg(0, 10, 5)), entry(seg(10, 20, 5)),
			entry(seg(0, 20, 5)),
		},
		{
			"same next, same pending: merged",
			entry(seg(0, 10, 9, 2, 4)), entry(seg(10, 20, 9, 2, 4)),
			entry(seg(0, 20, 9, 2, 4)),
		},
		{
			// 4 may be an offset the left part completed (its hash is
			// there) and the right part only inherited: merged, the
			// left part's record would run again.
			"same next, pending in one part only: apart",
			entry(seg(0, 10, 9, 2)), entry(seg(10, 20, 9, 2, 4)),
			entry(seg(0, 10, 9, 2), seg(10, 20, 9, 2, 4)),
		},
		{
			"same next, pending on one side: apart",
			entry(seg(0, 10, 9)), entry(seg(10, 20, 9, 4)),
			entry(seg(0, 10, 9), seg(10, 20, 9, 4)),
		},
		{
			"merges across several segments",
			entry(seg(0, 5, 3), seg(5, 10, 8)), entry(seg(10, 15, 8), seg(15, 20, 8)),
			entry(seg(0, 5, 3), seg(5, 20, 8)),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.a.Concat(tc.b)
			mustEqual(t, "Concat", got, tc.want)
			if err := got.Validate(hr(0, 20)); err != nil {
				t.Fatalf("Concat = %v: %v", got, err)
			}
		})
	}
	t.Run("merging does not write to its inputs", func(t *testing.T) {
		a, b := entry(seg(0, 10, 9, 2, 4)), entry(seg(10, 20, 9, 2, 4))
		j := a.Concat(b)
		j.Segments[0].Pending[0] = 99
		j.Segments[0].Hi = 77
		mustEqual(t, "a after Concat", a, entry(seg(0, 10, 9, 2, 4)))
		mustEqual(t, "b after Concat", b, entry(seg(10, 20, 9, 2, 4)))
	})
	t.Run("clip then concat gives back the entry", func(t *testing.T) {
		e := entry(seg(0, 100, 50, 10, 40), seg(100, 200, 60, 55))
		for _, cut := range []uint64{1, 50, 100, 150, 199} {
			j := e.Clip(hr(0, cut)).Concat(e.Clip(hr(cut, 200)))
			mustEqual(t, "Concat of the parts cut at "+hr(cut, cut).String(), j, e)
		}
	})
}
