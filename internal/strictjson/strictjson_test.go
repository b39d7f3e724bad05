package strictjson

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	Lo int   `json:"lo"`
	P  []int `json:"pending,omitempty"`
}

type outer struct {
	V    int       `json:"v"`
	Segs []inner   `json:"segments"`
	At   time.Time `json:"at"`
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
