package ledger_test

import (
	"reflect"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

func TestTruncate(t *testing.T) {
	t.Run("inherited pending and unread records below the log start are lost", func(t *testing.T) {
		// Low half: read up to 10, 3 and 7 inherited. High half: read up
		// to 20, 4 inherited.
		st := newState(t, ledger.Full, entry(seg(0, 1<<31, 10, 3, 7), seg(1<<31, top, 20, 4)), 0)
		v := st.Version()
		loss, lost := st.Truncate(15)
		if !lost {
			t.Fatal("Truncate(15) lost nothing")
		}
		want := ledger.Loss{LogStart: 15, Segments: []ledger.LostSegment{
			{Lo: 0, Hi: 1 << 31, Pending: []int64{3, 7}, UnreadFrom: 10},
			{Lo: 1 << 31, Hi: top, Pending: []int64{4}, UnreadFrom: 15},
		}}
		lossEqual(t, "loss", loss, want)
		mustEqual(t, "state after", st.Entry(), entry(seg(0, 1<<31, 15), seg(1<<31, top, 20)))
		if st.Version() == v {
			t.Error("Truncate changed the state without a new version")
		}
		if st.Watermark() != 15 {
			t.Errorf("watermark %d, want 15", st.Watermark())
		}
		if loss.Known() != 3 || loss.Window() != 3 {
			t.Errorf("Known() = %d, Window() = %d; want 3, 3", loss.Known(), loss.Window())
		}
	})
	t.Run("Covers names exactly the lost records", func(t *testing.T) {
		st := newState(t, ledger.Full, entry(seg(0, 1<<31, 10, 3, 7), seg(1<<31, top, 20, 4)), 0)
		loss, _ := st.Truncate(15)
		for _, c := range []struct {
			o    int64
			h    uint32
			want bool
		}{
			{3, lowH, true}, {7, lowH, true}, {5, lowH, false}, // pending vs done
			{10, lowH, true}, {14, lowH, true}, {15, lowH, false}, // the unread window ends at the log start
			{4, highH, true}, {3, highH, false}, {12, highH, false}, // the high half had read to 20
		} {
			if got := loss.Covers(c.o, c.h); got != c.want {
				t.Errorf("Covers(%d, %#x) = %v, want %v", c.o, c.h, got, c.want)
			}
		}
	})
	t.Run("records in flight here are kept", func(t *testing.T) {
		st := newState(t, r, entry(seg(100, 200, 5, 2)), 0)
		run(t, st, obs(2, in, ledger.Run), obs(5, in, ledger.Run), obs(6, in, ledger.Run), fin(6, in))
		if loss, lost := st.Truncate(7); lost {
			t.Fatalf("Truncate(7) reported %+v, but 2 and 5 are in flight and 6 is done", loss)
		}
		run(t, st, fin(2, in), fin(5, in))
		mustEqual(t, "after the in-flight records complete", st.Entry(), entry(seg(100, 200, 7)))
	})
	t.Run("nothing below the log start to lose", func(t *testing.T) {
		st := newState(t, r, entry(seg(100, 200, 50, 40)), 0)
		v := st.Version()
		if loss, lost := st.Truncate(30); lost || st.Version() != v {
			t.Fatalf("Truncate(30) = %+v, %v (version %d → %d); want nothing", loss, lost, v, st.Version())
		}
		mustEqual(t, "state", st.Entry(), entry(seg(100, 200, 50, 40)))
	})
	t.Run("segments left equal merge", func(t *testing.T) {
		st := newState(t, r, entry(seg(100, 150, 10, 4), seg(150, 200, 12)), 0)
		st.Truncate(20)
		mustEqual(t, "state", st.Entry(), entry(seg(100, 200, 20)))
	})
}

func TestLossClip(t *testing.T) {
	l := ledger.Loss{LogStart: 30, Segments: []ledger.LostSegment{
		{Lo: 0, Hi: 100, Pending: []int64{5}, UnreadFrom: 20},
		{Lo: 100, Hi: 200, UnreadFrom: 10},
	}}
	got, ok := l.Clip(hr(50, 150))
	want := ledger.Loss{LogStart: 30, Segments: []ledger.LostSegment{
		{Lo: 50, Hi: 100, Pending: []int64{5}, UnreadFrom: 20},
		{Lo: 100, Hi: 150, UnreadFrom: 10},
	}}
	if !ok {
		t.Fatal("Clip([50,150)) found nothing")
	}
	lossEqual(t, "Clip([50,150))", got, want)
	if got, ok := l.Clip(hr(200, 300)); ok {
		t.Errorf("Clip([200,300)) = %+v, want nothing", got)
	}
}

func TestLossCheck(t *testing.T) {
	good := ledger.Loss{LogStart: 300, Segments: []ledger.LostSegment{{Lo: 0, Hi: 1 << 31, Pending: []int64{120}, UnreadFrom: 250}}}
	if err := good.Check(); err != nil {
		t.Fatalf("Check(%+v) = %v", good, err)
	}
	for _, bad := range []ledger.LostSegment{
		{Lo: 0, Hi: 10, UnreadFrom: 301},                        // window past the log start
		{Lo: 0, Hi: 10, Pending: []int64{300}, UnreadFrom: 250}, // pending at the log start
		{Lo: 0, Hi: 10, Pending: []int64{9, 8}, UnreadFrom: 250},
		{Lo: 10, Hi: 10, UnreadFrom: 250},
		{Lo: 0, Hi: top + 1, UnreadFrom: 250},
	} {
		l := ledger.Loss{LogStart: 300, Segments: []ledger.LostSegment{bad}}
		if err := l.Check(); err == nil {
			t.Errorf("Check(%+v) = nil, want an error", l)
		}
	}
}

func lossEqual(t *testing.T, what string, got, want ledger.Loss) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %+v, want %+v", what, got, want)
	}
}
