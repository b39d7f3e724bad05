package strictjson

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

type inner struct {
	Lo int   `json:"lo"`
	P  []int `json:"pending,omitempty"`
}

type outer struct {
	V    int              `json:"v"`
	Segs []inner          `json:"segments"`
	At   time.Time        `json:"at"`
	By   map[string]inner `json:"by,omitempty"`
}

func TestDecode(t *testing.T) {
	cases := []struct {
		name, in, err string
	}{
		{"ok", `{"v":1,"segments":[{"lo":2,"pending":[3]}],"at":"2026-01-01T00:00:00Z"}`, ""},
		{"ok empty", `{"v":1,"segments":[]}`, ""},
		{"garbage", `{not json`, "invalid character"},
		{"unknown field", `{"v":1,"x":2}`, `unknown field "x"`},
		{"trailing brace", `{"v":1}}`, "trailing data"},
		{"trailing bracket", `{"v":1}]`, "trailing data"},
		{"second value", `{"v":1} {"v":2}`, "trailing data"},
		{"other case", `{"V":1}`, `unknown field "V"`},
		{"nested other case", `{"v":1,"segments":[{"Lo":1}]}`, `unknown field "Lo" in segments[]`},
		{"duplicate", `{"v":1,"v":2}`, `field "v" given twice`},
		{"nested duplicate", `{"v":1,"segments":[{"lo":1,"lo":2}]}`, `field "lo" given twice in segments[]`},
		// A map field in a value that is not canonical (its fields out of
		// order) is walked too: its keys are data, its values structs.
		{"map", `{"by":{"a":{"lo":1}},"v":1}`, ""},
		{"map value unknown field", `{"by":{"a":{"x":1}},"v":1}`, `unknown field "x"`},
		{"map value twice a field", `{"by":{"a":{"lo":1,"lo":2}},"v":1}`, `field "lo" given twice in by.a`},
		{"map key twice", `{"by":{"a":{"lo":1},"a":{"lo":2}},"v":1}`, `field "a" given twice in by`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var o outer
			err := Decode([]byte(tc.in), &o)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Decode = %v, want an error containing %q", err, tc.err)
			}
		})
	}
	var o outer
	if err := Decode([]byte(`{"v":7,"segments":[{"lo":2,"pending":[3,4]}]}`), &o); err != nil || o.V != 7 || o.Segs[0].P[1] != 4 {
		t.Fatalf("decoded %+v, %v", o, err)
	}
}

// TestDecodeCanonical: a value as json.Marshal writes it takes the fast
// path and decodes to what was written; the same value with a field given
// twice or in another case, which is not canonical, is still refused.
func TestDecodeCanonical(t *testing.T) {
	want := outer{V: 3, Segs: []inner{{Lo: 1, P: []int{2}}}, At: time.Date(2026, 12, 1, 6, 0, 0, 5, time.UTC)}
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got outer
	if err := Decode(data, &got); err != nil || got.V != want.V || !got.At.Equal(want.At) || got.Segs[0].P[0] != 2 {
		t.Fatalf("Decode(%s) = %+v, %v", data, got, err)
	}
	for _, bad := range []string{
		strings.Replace(string(data), `{"v":3,`, `{"v":3,"v":3,`, 1),
		strings.Replace(string(data), `"lo":1`, `"lo":1,"lo":1`, 1),
		strings.Replace(string(data), `"segments"`, `"Segments"`, 1),
	} {
		if bad == string(data) {
			t.Fatalf("the test's edit did not apply to %s", data)
		}
		if err := Decode([]byte(bad), &outer{}); err == nil {
			t.Errorf("Decode(%s) accepted a value that is not strict", bad)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	data, _ := json.Marshal(outer{V: 3, Segs: []inner{{Lo: 1, P: []int{2}}}, At: time.Now().UTC()})
	b.Run("canonical", func(b *testing.B) {
		for b.Loop() {
			var o outer
			if err := Decode(data, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
	spaced := []byte(strings.ReplaceAll(string(data), ",", ", "))
	b.Run("not canonical", func(b *testing.B) {
		for b.Loop() {
			var o outer
			if err := Decode(spaced, &o); err != nil {
				b.Fatal(err)
			}
		}
	})
}
