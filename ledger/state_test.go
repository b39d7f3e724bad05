package ledger_test

import (
	"errors"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

// Hashes used below: lowH and highH fall in the two halves of the space;
// in and out are inside and outside the range r = [100,200).
const (
	lowH  uint32 = 1 << 20
	highH uint32 = 1<<31 + 1<<20
	in    uint32 = 150
	out   uint32 = 50
)

var r = hr(100, 200)

// step is one call on a State: Observe when want is a verdict, Complete when
// want is 0.
type step struct {
	o    int64
	h    uint32
	want ledger.Verdict
}

func obs(o int64, h uint32, want ledger.Verdict) step { return step{o, h, want} }
func fin(o int64, h uint32) step                      { return step{o, h, 0} }

func run(t *testing.T, st *ledger.State, steps ...step) {
	t.Helper()
	for _, s := range steps {
		if s.want == 0 {
			if err := st.Complete(s.o, s.h); err != nil {
				t.Fatalf("Complete(%d, %d): %v", s.o, s.h, err)
			}
			continue
		}
		got, err := st.Observe(s.o, s.h)
		if err != nil || got != s.want {
			t.Fatalf("Observe(%d, %d) = %v, %v; want %v (state %v)", s.o, s.h, got, err, s.want, st.Entry())
		}
	}
}

func newState(t *testing.T, r ledger.HashRange, e ledger.Entry, start int64) *ledger.State {
	t.Helper()
	st, err := ledger.NewState(r, e, start)
	if err != nil {
		t.Fatalf("NewState(%s, %v, %d): %v", r, e, start, err)
	}
	return st
}

func TestNewState(t *testing.T) {
	t.Run("no entry starts at start", func(t *testing.T) {
		st := newState(t, r, ledger.Entry{}, 42)
		mustEqual(t, "Entry()", st.Entry(), entry(seg(100, 200, 42)))
		if st.Watermark() != 42 || st.Pending() != 0 || st.Range() != r || st.Version() != 0 {
			t.Fatalf("watermark %d pending %d range %s version %d", st.Watermark(), st.Pending(), st.Range(), st.Version())
		}
		if _, ok := st.Oldest(); ok {
			t.Fatal("Oldest() of a state without pending = ok")
		}
	})
	t.Run("entry wins over start", func(t *testing.T) {
		e := entry(seg(100, 150, 10, 4), seg(150, 200, 20))
		st := newState(t, r, e, 999)
		mustEqual(t, "Entry()", st.Entry(), e)
		if o, ok := st.Oldest(); st.Watermark() != 4 || st.Pending() != 1 || !ok || o != 4 {
			t.Fatalf("watermark %d pending %d oldest %d, %v", st.Watermark(), st.Pending(), o, ok)
		}
	})
	for _, tc := range []struct {
		name  string
		r     ledger.HashRange
		e     ledger.Entry
		start int64
	}{
		{"negative start", r, ledger.Entry{}, -1},
		{"invalid range", hr(5, 5), ledger.Entry{}, 0},
		{"entry of another range", r, entry(seg(0, 100, 5)), 0},
		{"invalid entry", r, entry(seg(100, 200, 5, 7)), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if st, err := ledger.NewState(tc.r, tc.e, tc.start); err == nil {
				t.Fatalf("NewState(%s, %v, %d) = %v, want an error", tc.r, tc.e, tc.start, st.Entry())
			}
		})
	}
}

func TestObserve(t *testing.T) {
	for _, tc := range []struct {
		name  string
		e     ledger.Entry // initial state; none: start at 10
		steps []step
		want  ledger.Entry
		wm    int64
	}{
		{
			name:  "new record in range runs",
			steps: []step{obs(10, in, ledger.Run)},
			want:  entry(seg(100, 200, 11, 10)), wm: 10,
		},
		{
			name:  "record outside range passes and counts as handled",
			steps: []step{obs(10, out, ledger.Pass)},
			want:  entry(seg(100, 200, 11)), wm: 11,
		},
		{
			name:  "completed record is skipped when delivered again",
			steps: []step{obs(10, in, ledger.Run), fin(10, in), obs(10, in, ledger.Skip)},
			want:  entry(seg(100, 200, 11)), wm: 11,
		},
		{
			name: "re-delivery after a seek: in flight and completed",
			steps: []step{
				obs(10, in, ledger.Run), obs(11, in, ledger.Run), obs(12, out, ledger.Pass), fin(11, in),
				// seek back to the watermark, 10
				obs(10, in, ledger.InFlight), obs(11, in, ledger.Skip), obs(12, out, ledger.Pass),
				obs(13, in, ledger.Run),
			},
			want: entry(seg(100, 200, 14, 10, 13)), wm: 10,
		},
		{
			name:  "record below the start offset is done",
			steps: []step{obs(9, in, ledger.Skip), obs(3, in, ledger.Skip)},
			want:  entry(seg(100, 200, 10)), wm: 10,
		},
		{
			name:  "offsets may have gaps",
			steps: []step{obs(10, in, ledger.Run), obs(15, in, ledger.Run), obs(40, out, ledger.Pass), fin(10, in)},
			want:  entry(seg(100, 200, 41, 15)), wm: 15,
		},
		{
			name: "inherited pending runs exactly once",
			e:    entry(seg(100, 200, 20, 12, 15)),
			steps: []step{
				obs(12, in, ledger.Run), obs(13, in, ledger.Skip), obs(15, in, ledger.Run), obs(19, in, ledger.Skip),
				// delivered again (another seek): in flight now
				obs(12, in, ledger.InFlight), obs(15, in, ledger.InFlight),
				fin(12, in), fin(15, in),
				obs(12, in, ledger.Skip), obs(15, in, ledger.Skip), obs(20, in, ledger.Run),
			},
			want: entry(seg(100, 200, 21, 20)), wm: 20,
		},
		{
			name:  "inherited pending whose record hashes elsewhere is dropped",
			e:     entry(seg(100, 200, 20, 12, 15)),
			steps: []step{obs(12, out, ledger.Pass), obs(15, in, ledger.Run)},
			want:  entry(seg(100, 200, 20, 15)), wm: 15,
		},
		{
			name: "segments: each record is judged by its own segment",
			e:    entry(seg(100, 150, 10, 5), seg(150, 200, 20, 5, 15)),
			steps: []step{
				obs(5, 120, ledger.Run),  // pending in the first; over-approximated in the second
				obs(8, 170, ledger.Skip), // below the second's next, not pending
				obs(10, 120, ledger.Run), // new for the first
				obs(15, 170, ledger.Run), // inherited in the second
				obs(16, 120, ledger.Run),
			},
			want: entry(seg(100, 150, 17, 5, 10, 16), seg(150, 200, 20, 15)), wm: 5,
		},
		{
			name: "segments merge when their next meets",
			e:    entry(seg(100, 150, 10), seg(150, 200, 12)),
			steps: []step{
				obs(10, 120, ledger.Run),
				obs(11, 170, ledger.Skip), // moves the first's next to 12
			},
			want: entry(seg(100, 200, 12, 10)), wm: 10,
		},
		{
			// 5 and 7 are pending in the second segment only: maybe
			// records of the first, which it completed. Merging before
			// they are delivered would run them again.
			name: "segments stay apart while one holds an inherited offset alone",
			e:    entry(seg(100, 150, 10), seg(150, 200, 10, 5, 7)),
			steps: []step{
				obs(5, 120, ledger.Skip), // completed by the first's owner; dropped by the second
				obs(7, 120, ledger.Skip), // likewise; now they merge
				obs(10, 170, ledger.Run),
			},
			want: entry(seg(100, 200, 11, 10)), wm: 10,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newState(t, r, tc.e, 10)
			run(t, st, tc.steps...)
			mustEqual(t, "Entry()", st.Entry(), tc.want)
			if got := st.Watermark(); got != tc.wm {
				t.Fatalf("Watermark() = %d, want %d", got, tc.wm)
			}
			if st.Pending() != tc.want.PendingCount() {
				t.Fatalf("Pending() = %d, want %d", st.Pending(), tc.want.PendingCount())
			}
		})
	}
	t.Run("not yet merged", func(t *testing.T) {
		st := newState(t, r, entry(seg(100, 150, 10), seg(150, 200, 10, 5, 7)), 0)
		run(t, st, obs(5, 120, ledger.Skip))
		mustEqual(t, "Entry() with 7 still inherited", st.Entry(), entry(seg(100, 150, 10), seg(150, 200, 10, 7)))
	})
	t.Run("negative offset", func(t *testing.T) {
		st := newState(t, r, ledger.Entry{}, 10)
		before := st.Entry()
		_, err := st.Observe(-1, in)
		var oe *ledger.OffsetError
		if !errors.As(err, &oe) || oe.Op != "observe" || oe.Offset != -1 {
			t.Fatalf("Observe(-1) error = %v, want an *OffsetError for observe -1", err)
		}
		mustEqual(t, "Entry() after the refused Observe", st.Entry(), before)
	})
	t.Run("version grows with every change to the entry", func(t *testing.T) {
		st := newState(t, r, entry(seg(100, 200, 10, 5)), 0)
		v := st.Version()
		run(t, st, obs(5, in, ledger.Run)) // entry unchanged: 5 was pending already
		if st.Version() != v {
			t.Fatalf("version %d → %d without a change to the entry", v, st.Version())
		}
		for _, s := range []step{obs(10, in, ledger.Run), fin(5, in), obs(11, out, ledger.Pass)} {
			v = st.Version()
			run(t, st, s)
			if st.Version() <= v {
				t.Fatalf("version stayed %d after %+v", v, s)
			}
		}
		v = st.Version()
		run(t, st, obs(10, in, ledger.InFlight), obs(5, in, ledger.Skip))
		if st.Version() != v {
			t.Fatalf("version %d → %d after re-deliveries", v, st.Version())
		}
	})
}

func TestComplete(t *testing.T) {
	// A state with 10 in flight, 11 completed, 12 passed over, 30 inherited.
	setup := func(t *testing.T) *ledger.State {
		t.Helper()
		st := newState(t, r, entry(seg(100, 200, 10, 3)), 0)
		run(t, st, obs(10, in, ledger.Run), obs(11, in, ledger.Run), fin(11, in), obs(12, out, ledger.Pass))
		return st
	}
	for _, tc := range []struct {
		name string
		o    int64
		h    uint32
	}{
		{"never fetched", 50, in},
		{"completed twice", 11, in},
		{"hash outside the range", 10, out},
		{"passed over", 12, out},
		{"passed over, under a hash in range", 12, in},
		{"inherited, not run here yet", 3, in},
		{"negative", -1, in},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := setup(t)
			before, v := st.Entry(), st.Version()
			err := st.Complete(tc.o, tc.h)
			if !errors.Is(err, ledger.ErrNotDispatched) {
				t.Fatalf("Complete(%d, %d) = %v, want ErrNotDispatched", tc.o, tc.h, err)
			}
			var oe *ledger.OffsetError
			if !errors.As(err, &oe) || oe.Op != "complete" || oe.Offset != tc.o {
				t.Fatalf("Complete(%d, %d) error %v, want an *OffsetError naming the offset", tc.o, tc.h, err)
			}
			mustEqual(t, "Entry() after the refused Complete", st.Entry(), before)
			if st.Version() != v {
				t.Fatalf("version %d → %d after a refused Complete", v, st.Version())
			}
			// The record in flight can still be completed.
			if err := st.Complete(10, in); err != nil {
				t.Fatalf("Complete(10) after the refusal: %v", err)
			}
		})
	}
}

func TestStateClip(t *testing.T) {
	// Full range; 3 inherited (hash unknown), 5 in flight in the low half, 6
	// in flight in the high half, 7 completed in the low half.
	setup := func(t *testing.T) *ledger.State {
		t.Helper()
		st := newState(t, ledger.Full, entry(seg(0, top, 5, 3)), 0)
		run(t, st, obs(5, lowH, ledger.Run), obs(6, highH, ledger.Run), obs(7, lowH, ledger.Run), fin(7, lowH))
		return st
	}
	low, high := hr(0, 1<<31), hr(1<<31, top)

	t.Run("in-flight offsets follow their hash; inherited ones go to every part", func(t *testing.T) {
		st := setup(t)
		lo, hi := st.Clip(low), st.Clip(high)
		mustEqual(t, "low part", lo.Entry(), entry(seg(0, 1<<31, 8, 3, 5)))
		mustEqual(t, "high part", hi.Entry(), entry(seg(1<<31, top, 8, 3, 6)))
		if lo.Range() != low || hi.Range() != high {
			t.Fatalf("ranges %s, %s", lo.Range(), hi.Range())
		}
		// Each in-flight record completes in its own part only.
		if err := lo.Complete(6, highH); !errors.Is(err, ledger.ErrNotDispatched) {
			t.Fatalf("low part: Complete(6) of a high record = %v", err)
		}
		run(t, lo, fin(5, lowH))
		run(t, hi, fin(6, highH))
		// Re-delivered, each is in flight or done in its part only.
		run(t, st.Clip(low), obs(5, lowH, ledger.InFlight), obs(6, highH, ledger.Pass), obs(7, lowH, ledger.Skip))
		// The inherited offset runs in the part its record hashes to and
		// is dropped by the other.
		run(t, lo, obs(3, highH, ledger.Pass))
		run(t, hi, obs(3, highH, ledger.Run))
		mustEqual(t, "low part after", lo.Entry(), entry(seg(0, 1<<31, 8)))
		mustEqual(t, "high part after", hi.Entry(), entry(seg(1<<31, top, 8, 3)))
	})
	t.Run("parts are independent of the whole", func(t *testing.T) {
		st := setup(t)
		before := st.Entry()
		lo := st.Clip(low)
		run(t, lo, fin(5, lowH), obs(8, lowH, ledger.Run))
		mustEqual(t, "whole after changing a part", st.Entry(), before)
		run(t, st, fin(5, lowH))
		if _, err := lo.Observe(9, lowH); err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "part after changing the whole", lo.Entry(), entry(seg(0, 1<<31, 10, 3, 8, 9)))
	})
	t.Run("watermark and version", func(t *testing.T) {
		st := setup(t)
		for _, part := range []ledger.HashRange{low, high, hr(5, 6), ledger.Full} {
			c := st.Clip(part)
			if c.Watermark() < st.Watermark() {
				t.Errorf("Clip(%s).Watermark() = %d, below the whole's %d", part, c.Watermark(), st.Watermark())
			}
			if c.Version() != st.Version() {
				t.Errorf("Clip(%s).Version() = %d, want %d", part, c.Version(), st.Version())
			}
		}
	})
	t.Run("cuts segments", func(t *testing.T) {
		st := newState(t, r, entry(seg(100, 150, 10, 4), seg(150, 200, 20, 4, 15)), 0)
		c := st.Clip(hr(140, 160))
		mustEqual(t, "Clip([140,160))", c.Entry(), entry(seg(140, 150, 10, 4), seg(150, 160, 20, 4, 15)))
		mustEqual(t, "Clip([150,200))", st.Clip(hr(150, 200)).Entry(), entry(seg(150, 200, 20, 4, 15)))
	})
}

func TestStateConcat(t *testing.T) {
	low, high := hr(0, 1<<31), hr(1<<31, top)
	t.Run("not adjacent", func(t *testing.T) {
		a := newState(t, hr(0, 10), ledger.Entry{}, 0)
		b := newState(t, hr(11, 20), ledger.Entry{}, 0)
		if _, err := a.Concat(b); err == nil {
			t.Fatal("Concat of [0,10) and [11,20) succeeded")
		}
		if _, err := newState(t, hr(10, 20), ledger.Entry{}, 0).Concat(a); err == nil {
			t.Fatal("Concat of [10,20) and [0,10) succeeded")
		}
	})
	t.Run("different next stay apart; in-flight records complete in the whole", func(t *testing.T) {
		a := newState(t, low, ledger.Entry{}, 10)
		b := newState(t, high, ledger.Entry{}, 20)
		run(t, a, obs(10, lowH, ledger.Run))
		run(t, b, obs(20, highH, ledger.Run))
		j, err := a.Concat(b)
		if err != nil {
			t.Fatal(err)
		}
		mustEqual(t, "joined", j.Entry(), entry(seg(0, 1<<31, 11, 10), seg(1<<31, top, 21, 20)))
		if j.Range() != ledger.Full || j.Watermark() != 10 {
			t.Fatalf("range %s watermark %d", j.Range(), j.Watermark())
		}
		if j.Version() <= a.Version() || j.Version() <= b.Version() {
			t.Fatalf("joined version %d, parts %d and %d", j.Version(), a.Version(), b.Version())
		}
		// Re-delivered from the watermark, and completed, through the whole.
		run(t, j,
			obs(10, lowH, ledger.InFlight), obs(11, highH, ledger.Skip), obs(20, highH, ledger.InFlight), obs(21, lowH, ledger.Run),
			fin(10, lowH), fin(20, highH), fin(21, lowH))
		mustEqual(t, "joined after", j.Entry(), entry(seg(0, top, 22)))
	})
	t.Run("equal next merge at once", func(t *testing.T) {
		a := newState(t, low, ledger.Entry{}, 10)
		b := newState(t, high, ledger.Entry{}, 10)
		run(t, a, obs(10, lowH, ledger.Run))
		run(t, b, obs(10, lowH, ledger.Pass))
		j, _ := a.Concat(b)
		mustEqual(t, "joined", j.Entry(), entry(seg(0, top, 11, 10)))
		run(t, j, fin(10, lowH))
	})
	t.Run("inherited offset waiting in both parts merges", func(t *testing.T) {
		whole := newState(t, ledger.Full, entry(seg(0, top, 10, 3)), 0)
		j, _ := whole.Clip(low).Concat(whole.Clip(high))
		mustEqual(t, "joined", j.Entry(), entry(seg(0, top, 10, 3)))
		run(t, j, obs(3, highH, ledger.Run), obs(3, highH, ledger.InFlight), fin(3, highH))
	})
	t.Run("a part's completions survive the join", func(t *testing.T) {
		// The whole inherited 3 and 5; the low part ran and completed
		// them (their keys hash low); the high part has not fetched yet.
		// Joined, they must be skipped, not run a second time.
		whole := newState(t, ledger.Full, entry(seg(0, top, 10, 3, 5)), 0)
		a, b := whole.Clip(low), whole.Clip(high)
		run(t, a, obs(3, lowH, ledger.Run), obs(5, lowH, ledger.Run), fin(3, lowH), fin(5, lowH))
		j, _ := a.Concat(b)
		for _, o := range []int64{3, 5} {
			if j.Entry().Done(o, lowH) != true {
				t.Fatalf("joined entry %v: record %d (done in the low part) is not done", j.Entry(), o)
			}
		}
		run(t, j, obs(3, lowH, ledger.Skip), obs(5, lowH, ledger.Skip))
		// Both parts' state is also right in a new owner's hands.
		k := newState(t, ledger.Full, a.Entry().Concat(b.Entry()), 0)
		run(t, k, obs(3, lowH, ledger.Skip), obs(5, lowH, ledger.Skip))
	})
}

func TestDispatched(t *testing.T) {
	st := newState(t, r, entry(seg(100, 200, 10, 3, 5)), 0)
	for _, tc := range []struct {
		step step
		want int // in flight after the step
	}{
		{obs(3, in, ledger.Run), 1},      // inherited, now run here
		{obs(5, out, ledger.Pass), 1},    // inherited, dropped
		{obs(10, in, ledger.Run), 2},     // new
		{obs(3, in, ledger.InFlight), 2}, // re-delivered
		{fin(3, in), 1},
		{obs(11, out, ledger.Pass), 1},
		{fin(10, in), 0},
	} {
		run(t, st, tc.step)
		if got := st.Dispatched(); got != tc.want {
			t.Fatalf("after %+v: Dispatched() = %d, want %d (pending %d)", tc.step, got, tc.want, st.Pending())
		}
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[ledger.Verdict]string{
		ledger.Run: "run", ledger.Skip: "skip", ledger.InFlight: "in-flight", ledger.Pass: "pass", 0: "Verdict(0)", 9: "Verdict(9)",
	} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", uint8(v), got, want)
		}
	}
}
