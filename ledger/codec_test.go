package ledger_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/keyshare/keyshare/ledger"
)

func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    ledger.Entry
		want string
	}{
		{"no state", ledger.Entry{}, `{"v":1,"segments":[]}`},
		{"empty segments", ledger.Entry{Segments: []ledger.Segment{}}, `{"v":1,"segments":[]}`},
		{"one segment", entry(seg(0, top, 1200, 1100, 1150)), `{"v":1,"segments":[{"lo":0,"hi":4294967296,"next":1200,"pending":[1100,1150]}]}`},
		{"no pending is omitted", entry(seg(0, 10, 7), seg(10, 20, 9, 8)), `{"v":1,"segments":[{"lo":0,"hi":10,"next":7},{"lo":10,"hi":20,"next":9,"pending":[8]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(ledger.Encode(tc.e)); got != tc.want {
				t.Fatalf("Encode(%v) =\n  %s\nwant\n  %s", tc.e, got, tc.want)
			}
		})
	}
}

func TestDecode(t *testing.T) {
	r := hr(0, 20)
	for _, tc := range []struct {
		name    string
		data    string
		want    ledger.Entry
		wantErr string // "" for success
	}{
		{"no state", `{"v":1,"segments":[]}`, ledger.Entry{}, ""},
		{"no segments field", `{"v":1}`, ledger.Entry{}, ""},
		{"null segments", `{"v":1,"segments":null}`, ledger.Entry{}, ""},
		{"one segment", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9,"pending":[3,5]}]}`, entry(seg(0, 20, 9, 3, 5)), ""},
		{"empty pending", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9,"pending":[]}]}`, entry(seg(0, 20, 9)), ""},
		{"whitespace around", " \n{ \"v\" : 1 , \"segments\" : [ ] }\n\t", ledger.Entry{}, ""},
		{"field order", `{"segments":[{"next":9,"hi":20,"lo":0}],"v":1}`, entry(seg(0, 20, 9)), ""},

		{"empty input", ``, ledger.Entry{}, "not a ledger entry"},
		{"not JSON", `next=9`, ledger.Entry{}, "not a ledger entry"},
		{"truncated", `{"v":1,"segments":[`, ledger.Entry{}, "not a ledger entry"},
		{"null", `null`, ledger.Entry{}, "format version 0"},
		{"array", `[]`, ledger.Entry{}, "not a ledger entry"},
		{"no version", `{"segments":[]}`, ledger.Entry{}, "format version 0, this build reads version 1"},
		{"future version", `{"v":2,"segments":[]}`, ledger.Entry{}, "format version 2"},
		{"version as string", `{"v":"1","segments":[]}`, ledger.Entry{}, "not a ledger entry"},
		{"unknown field", `{"v":1,"segments":[],"owner":"m1"}`, ledger.Entry{}, `unknown field "owner"`},
		{"unknown segment field", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9,"done":[]}]}`, ledger.Entry{}, `unknown field "done"`},
		{"trailing value", `{"v":1,"segments":[]}{"v":1,"segments":[]}`, ledger.Entry{}, "trailing data"},
		{"trailing garbage", `{"v":1,"segments":[]} x`, ledger.Entry{}, "trailing data"},
		{"trailing bracket", `{"v":1,"segments":[]}]`, ledger.Entry{}, "trailing data"},
		{"trailing brace", `{"v":1,"segments":[]}}`, ledger.Entry{}, "trailing data"},
		{"fractional offset", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9.5}]}`, ledger.Entry{}, "not a ledger entry"},
		{"negative hash", `{"v":1,"segments":[{"lo":-1,"hi":20,"next":9}]}`, ledger.Entry{}, "not a ledger entry"},
		{"offset overflow", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9223372036854775808}]}`, ledger.Entry{}, "not a ledger entry"},
		{"negative next", `{"v":1,"segments":[{"lo":0,"hi":20,"next":-1}]}`, ledger.Entry{}, "negative next offset"},
		{"pending not below next", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9,"pending":[9]}]}`, ledger.Entry{}, "not below next"},
		{"pending unsorted", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9,"pending":[5,3]}]}`, ledger.Entry{}, "not strictly ascending"},
		{"pending duplicate", `{"v":1,"segments":[{"lo":0,"hi":20,"next":9,"pending":[3,3]}]}`, ledger.Entry{}, "not strictly ascending"},
		{"another range", `{"v":1,"segments":[{"lo":0,"hi":30,"next":9}]}`, ledger.Entry{}, "segments end at hash 30, want 20"},
		{"gap", `{"v":1,"segments":[{"lo":0,"hi":10,"next":9},{"lo":11,"hi":20,"next":9}]}`, ledger.Entry{}, "segment 1 starts at hash 11"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const key = "/keyshare/g/ledger/orders/0/0000000000"
			got, err := ledger.Decode(key, []byte(tc.data), r)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Decode(%s): %v", tc.data, err)
				}
				mustEqual(t, "Decode", got, tc.want)
				if got.Initialized() != tc.want.Initialized() {
					t.Fatalf("Decode(%s).Initialized() = %v", tc.data, got.Initialized())
				}
				return
			}
			var de *ledger.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode(%s) = %v, %v; want a *DecodeError containing %q", tc.data, got, err, tc.wantErr)
			}
			if de.Key != key || !strings.Contains(err.Error(), key) {
				t.Errorf("error %q does not name the key %q", err, key)
			}
			if !strings.Contains(de.Problem, tc.wantErr) {
				t.Errorf("problem %q, want it to contain %q", de.Problem, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "delete the key") {
				t.Errorf("error %q does not say what to do", err)
			}
			if got.Initialized() {
				t.Errorf("Decode returned state %v with an error", got)
			}
		})
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		r ledger.HashRange
		e ledger.Entry
	}{
		{ledger.Full, ledger.Entry{}},
		{ledger.Full, entry(seg(0, top, 0))},
		{ledger.Full, entry(seg(0, top, 1<<63-1, 0, 1<<63-2))},
		{hr(7, 9), entry(seg(7, 8, 3, 1), seg(8, 9, 4))},
	} {
		t.Run(tc.r.String(), func(t *testing.T) {
			got, err := ledger.Decode("k", ledger.Encode(tc.e), tc.r)
			if err != nil {
				t.Fatal(err)
			}
			mustEqual(t, "Decode(Encode)", got, tc.e)
		})
	}
}

// FuzzDecode feeds Decode arbitrary bytes: it must never panic, and what it
// accepts must be valid and survive Encode → Decode unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"segments":[]}`,
		`{"v":1,"segments":[{"lo":0,"hi":4294967296,"next":1200,"pending":[1100,1150]}]}`,
		`{"v":1,"segments":[{"lo":0,"hi":2147483648,"next":7},{"lo":2147483648,"hi":4294967296,"next":9,"pending":[8]}]}`,
		`{"v":1,"segments":[{"lo":0,"hi":4294967296,"next":9,"pending":[9]}]}`,
		`{"v":1,"segments":[{"lo":0,"hi":4294967296,"next":9,"pending":[5,3]}]}`,
		`{"v":2,"segments":[]}`,
		`{"v":1,"segments":[]}]`,
		`{"v":1,"segments":[],"x":1}`,
		`null`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range []ledger.HashRange{ledger.Full, hr(0, 1<<31), hr(1<<31, top)} {
			e, err := ledger.Decode("k", data, r)
			if err != nil {
				var de *ledger.DecodeError
				if !errors.As(err, &de) || de.Key != "k" {
					t.Fatalf("Decode(%q) error %v (%T) is not a *DecodeError for the key", data, err, err)
				}
				continue
			}
			if err := e.Validate(r); err != nil {
				t.Fatalf("Decode(%q, %s) accepted an invalid entry %v: %v", data, r, e, err)
			}
			enc := ledger.Encode(e)
			e2, err := ledger.Decode("k", enc, r)
			if err != nil {
				t.Fatalf("Decode(Encode(%v)) = %v (encoded %s)", e, err, enc)
			}
			if !entriesEqual(e, e2) {
				t.Fatalf("Decode(Encode(%v)) = %v", e, e2)
			}
			if enc2 := ledger.Encode(e2); string(enc2) != string(enc) {
				t.Fatalf("Encode is not stable: %s then %s", enc, enc2)
			}
			// An accepted entry must start a state.
			if _, err := ledger.NewState(r, e, 0); err != nil {
				t.Fatalf("NewState(%s, %v) of a decoded entry: %v", r, e, err)
			}
		}
	})
}

// genEntry draws a valid entry for a random range.
func genEntry(t *rapid.T) (ledger.HashRange, ledger.Entry) {
	lo := rapid.Uint64Range(0, top-1).Draw(t, "lo")
	hi := rapid.Uint64Range(lo+1, top).Draw(t, "hi")
	r := hr(lo, hi)
	if rapid.IntRange(0, 9).Draw(t, "no state") == 0 {
		return r, ledger.Entry{}
	}
	cuts := []uint64{lo, hi}
	for range rapid.IntRange(0, 4).Draw(t, "cuts") {
		cuts = append(cuts, rapid.Uint64Range(lo, hi).Draw(t, "cut"))
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var e ledger.Entry
	for i := 1; i < len(cuts); i++ {
		next := rapid.OneOf(rapid.Int64Range(0, 1000), rapid.Int64Range(0, 1<<63-1)).Draw(t, "next")
		var pending []int64
		if next > 0 {
			pending = rapid.SliceOfNDistinct(rapid.Int64Range(0, next-1), 0, 20, rapid.ID).Draw(t, "pending")
			slices.Sort(pending)
		}
		e.Segments = append(e.Segments, ledger.Segment{Lo: cuts[i-1], Hi: cuts[i], Next: next, Pending: pending})
	}
	return r, e
}

// TestEntryProperties checks the codec and Clip/Concat on random valid
// entries.
func TestEntryProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r, e := genEntry(t)
		if err := e.Validate(r); err != nil {
			t.Fatalf("generated an invalid entry %v for %s: %v", e, r, err)
		}
		enc := ledger.Encode(e)
		d, err := ledger.Decode("k", enc, r)
		if err != nil || !entriesEqual(d, e) {
			t.Fatalf("Decode(Encode(%v)) = %v, %v (encoded %s)", e, d, err, enc)
		}
		if !e.Initialized() || r.Len() < 2 {
			return
		}
		// Cut anywhere and join again: the same records are done.
		c := rapid.Uint64Range(r.Lo+1, r.Hi-1).Draw(t, "split at")
		a, b := e.Clip(hr(r.Lo, c)), e.Clip(hr(c, r.Hi))
		if err := a.Validate(hr(r.Lo, c)); err != nil {
			t.Fatalf("Clip: %v", err)
		}
		if err := b.Validate(hr(c, r.Hi)); err != nil {
			t.Fatalf("Clip: %v", err)
		}
		j := a.Concat(b)
		if err := j.Validate(r); err != nil {
			t.Fatalf("Concat(%v, %v) = %v: %v", a, b, j, err)
		}
		if len(j.Segments) > len(e.Segments) {
			t.Fatalf("Concat of the halves of %v has more segments: %v", e, j)
		}
		for range 20 {
			h := uint32(rapid.Uint64Range(r.Lo, r.Hi-1).Draw(t, "probe hash"))
			s := e.Segments[slices.IndexFunc(e.Segments, func(s ledger.Segment) bool { return s.Range().Contains(h) })]
			o := rapid.Int64Range(0, s.Next).Draw(t, "probe offset")
			if got, want := j.Done(o, h), e.Done(o, h); got != want {
				t.Fatalf("record %d (hash %d): done=%v after split and join, %v before (%v → %v)", o, h, got, want, e, j)
			}
			if got, want := e.Clip(hr(uint64(h), uint64(h)+1)).Done(o, h), e.Done(o, h); got != want {
				t.Fatalf("record %d (hash %d): done=%v in a one-hash clip, %v in %v", o, h, got, want, e)
			}
		}
	})
}
