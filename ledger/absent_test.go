package ledger_test

import (
	"slices"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

func TestSkip(t *testing.T) {
	t.Run("a tail of markers and aborted records moves next", func(t *testing.T) {
		st := newState(t, r, ledger.Entry{}, 0)
		run(t, st, obs(0, in, ledger.Run), obs(1, out, ledger.Pass), fin(0, in))
		v := st.Version()
		if d := st.Skip(2, 5); d != nil {
			t.Fatalf("Skip(2, 5) dropped %v, want nothing", d)
		}
		mustEqual(t, "after the skip", st.Entry(), entry(seg(100, 200, 5)))
		if st.Version() == v || st.Watermark() != 5 {
			t.Errorf("version %d (was %d), watermark %d; want a new version and 5", st.Version(), v, st.Watermark())
		}
	})
	t.Run("records in flight hold the watermark", func(t *testing.T) {
		st := newState(t, r, ledger.Entry{}, 0)
		run(t, st, obs(0, in, ledger.Run))
		st.Skip(1, 9)
		if st.Watermark() != 0 {
			t.Fatalf("watermark %d, want 0 (record 0 is in flight)", st.Watermark())
		}
		run(t, st, fin(0, in))
		if st.Watermark() != 9 {
			t.Fatalf("watermark %d, want 9", st.Watermark())
		}
	})
	t.Run("an inherited pending offset with no record is dropped", func(t *testing.T) {
		// Inherited: next 20, 3 and 12 pending. The new owner seeks to 3;
		// the fetcher delivers 4 first (3 was compacted away), then 13
		// (12 too).
		st := newState(t, r, entry(seg(100, 200, 20, 3, 12)), 0)
		if d := st.Skip(3, 4); !slices.Equal(d, []int64{3}) {
			t.Fatalf("Skip(3, 4) dropped %v, want [3]", d)
		}
		run(t, st, obs(4, in, ledger.Skip))
		if d := st.Skip(5, 13); !slices.Equal(d, []int64{12}) {
			t.Fatalf("Skip(5, 13) dropped %v, want [12]", d)
		}
		mustEqual(t, "after both", st.Entry(), entry(seg(100, 200, 20)))
	})
	t.Run("an offset in flight here is kept", func(t *testing.T) {
		// 3 was fetched and handed to a worker; after a seek back the
		// fetcher no longer finds it (compacted meanwhile): it completes
		// as it is.
		st := newState(t, r, entry(seg(100, 200, 3, 2)), 0)
		run(t, st, obs(2, in, ledger.Run), obs(3, in, ledger.Run))
		if d := st.Skip(2, 4); d != nil {
			t.Fatalf("Skip(2, 4) dropped %v, want nothing (2 and 3 are in flight)", d)
		}
		mustEqual(t, "after the skip", st.Entry(), entry(seg(100, 200, 4, 2, 3)))
	})
	t.Run("a segment that has not read up to from keeps its next", func(t *testing.T) {
		st := newState(t, ledger.Full, entry(seg(0, 1<<31, 5), seg(1<<31, top, 10)), 0)
		st.Skip(8, 12)
		mustEqual(t, "after the skip", st.Entry(), entry(seg(0, 1<<31, 5), seg(1<<31, top, 12)))
	})
	t.Run("never backwards, and an empty window is nothing", func(t *testing.T) {
		st := newState(t, r, entry(seg(100, 200, 10)), 0)
		v := st.Version()
		for _, w := range [][2]int64{{3, 5}, {10, 10}, {12, 11}, {-1, 4}, {11, 15}} {
			st.Skip(w[0], w[1])
		}
		if st.Version() != v {
			t.Errorf("version moved from %d to %d", v, st.Version())
		}
		mustEqual(t, "after the skips", st.Entry(), entry(seg(100, 200, 10)))
	})
	t.Run("an inherited offset waiting in two parts is reported once and the parts merge", func(t *testing.T) {
		st := newState(t, ledger.Full, entry(seg(0, 1<<31, 10, 7), seg(1<<31, top, 10, 7)), 0)
		if d := st.Skip(7, 10); !slices.Equal(d, []int64{7}) {
			t.Fatalf("Skip(7, 10) dropped %v, want [7]", d)
		}
		mustEqual(t, "after the skip", st.Entry(), entry(seg(0, top, 10)))
	})
	t.Run("an offset in flight in one part and waiting in another is not reported", func(t *testing.T) {
		// 7 is inherited by two ranges; its record (hash 5, the low
		// range's) was fetched and runs there when the ranges are joined,
		// then is compacted away. The high part's copy goes, but the
		// record is not gone: it completes.
		low := newState(t, ledger.HashRange{Lo: 0, Hi: 1 << 31}, entry(seg(0, 1<<31, 8, 7)), 0)
		high := newState(t, ledger.HashRange{Lo: 1 << 31, Hi: top}, entry(seg(1<<31, top, 10, 7)), 0)
		run(t, low, obs(7, 5, ledger.Run))
		st, err := low.Concat(high)
		if err != nil {
			t.Fatal(err)
		}
		if d := st.Skip(7, 8); d != nil {
			t.Fatalf("Skip(7, 8) dropped %v, want nothing (7 is in flight in the low part)", d)
		}
		run(t, st, fin(7, 5))
		if st.Watermark() != 8 {
			t.Fatalf("watermark %d, want 8", st.Watermark())
		}
	})
}
