package ledger_test

import (
	"slices"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

func hr(lo, hi uint64) ledger.HashRange { return ledger.HashRange{Lo: lo, Hi: hi} }

const top = ledger.HashSpace // 1 << 32

func TestHashRangeContains(t *testing.T) {
	for _, tc := range []struct {
		r    ledger.HashRange
		h    uint32
		want bool
	}{
		{ledger.Full, 0, true},
		{ledger.Full, 1<<32 - 1, true},
		{hr(10, 20), 9, false},
		{hr(10, 20), 10, true},
		{hr(10, 20), 19, true},
		{hr(10, 20), 20, false},
		{hr(1<<31, top), 1<<31 - 1, false},
		{hr(1<<31, top), 1<<32 - 1, true},
		{hr(5, 5), 5, false},
	} {
		t.Run(tc.r.String(), func(t *testing.T) {
			if got := tc.r.Contains(tc.h); got != tc.want {
				t.Fatalf("%s.Contains(%d) = %v, want %v", tc.r, tc.h, got, tc.want)
			}
		})
	}
}

func TestHashRangeLenEmpty(t *testing.T) {
	for _, tc := range []struct {
		r     ledger.HashRange
		len   uint64
		empty bool
	}{
		{ledger.Full, top, false},
		{hr(10, 20), 10, false},
		{hr(10, 11), 1, false},
		{hr(10, 10), 0, true},
		{hr(20, 10), 0, true}, // Len is only meaningful for a non-empty range
	} {
		t.Run(tc.r.String(), func(t *testing.T) {
			if got := tc.r.Empty(); got != tc.empty {
				t.Errorf("%s.Empty() = %v, want %v", tc.r, got, tc.empty)
			}
			if !tc.empty && tc.r.Len() != tc.len {
				t.Errorf("%s.Len() = %d, want %d", tc.r, tc.r.Len(), tc.len)
			}
		})
	}
}

func TestHashRangeIntersect(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b ledger.HashRange
		want ledger.HashRange // compared only if non-empty
	}{
		{"inside", ledger.Full, hr(10, 20), hr(10, 20)},
		{"overlap left", hr(10, 20), hr(5, 15), hr(10, 15)},
		{"overlap right", hr(10, 20), hr(15, 25), hr(15, 20)},
		{"same", hr(10, 20), hr(10, 20), hr(10, 20)},
		{"adjacent", hr(10, 20), hr(20, 30), hr(20, 20)},
		{"disjoint", hr(10, 20), hr(30, 40), hr(30, 30)},
		{"disjoint reversed", hr(30, 40), hr(10, 20), hr(30, 30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.a.Intersect(tc.b)
			if got != tc.b.Intersect(tc.a) {
				t.Errorf("%s ∩ %s = %s but %s ∩ %s = %s", tc.a, tc.b, got, tc.b, tc.a, tc.b.Intersect(tc.a))
			}
			if tc.want.Empty() {
				if !got.Empty() || got.Hi < got.Lo {
					t.Fatalf("%s ∩ %s = %s, want an empty range with hi >= lo", tc.a, tc.b, got)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("%s ∩ %s = %s, want %s", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestHashRangeMinus(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b ledger.HashRange
		want []ledger.HashRange
	}{
		{"a middle", hr(10, 20), hr(12, 15), []ledger.HashRange{hr(10, 12), hr(15, 20)}},
		{"the left end", hr(10, 20), hr(5, 15), []ledger.HashRange{hr(15, 20)}},
		{"the right end", hr(10, 20), hr(15, 25), []ledger.HashRange{hr(10, 15)}},
		{"all of it", hr(10, 20), hr(10, 20), nil},
		{"more than all", hr(10, 20), ledger.Full, nil},
		{"an adjacent range", hr(10, 20), hr(20, 30), []ledger.HashRange{hr(10, 20)}},
		{"nothing", hr(10, 20), hr(15, 15), []ledger.HashRange{hr(10, 20)}},
		{"from nothing", hr(10, 10), hr(0, 5), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Minus(tc.b); !slices.Equal(got, tc.want) {
				t.Fatalf("%s minus %s = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

func TestHashRangeValid(t *testing.T) {
	for _, tc := range []struct {
		r  ledger.HashRange
		ok bool
	}{
		{ledger.Full, true},
		{hr(0, 1), true},
		{hr(top-1, top), true},
		{hr(5, 5), false},
		{hr(6, 5), false},
		{hr(0, top+1), false},
		{hr(top, top+1), false},
	} {
		t.Run(tc.r.String(), func(t *testing.T) {
			if err := tc.r.Valid(); (err == nil) != tc.ok {
				t.Fatalf("%s.Valid() = %v, want ok=%v", tc.r, err, tc.ok)
			}
		})
	}
}

func TestHashRangeString(t *testing.T) {
	if got, want := ledger.Full.String(), "[0,4294967296)"; got != want {
		t.Fatalf("Full.String() = %q, want %q", got, want)
	}
}
