package textsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"key-3", "key-3"},
		{"a b", "a b"},
		{"ключ", "ключ"},
		{"", ""},
		{"\x1b[2J", `"\x1b[2J"`},
		{"line\nnext", `"line\nnext"`},
		{"csi\u009b2J", `"csi\u009b2J"`},
		{"bad\xff", `"bad\xff"`},
		{"bell\a", `"bell\a"`},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestFirstFew(t *testing.T) {
	name := func(s string) string { return s }
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b", "c"}, "a, b, c"},
		{[]string{"a", "b", "c", "d"}, "a, b, c, and 1 more"},
		{[]string{"a", "b", "c", "d", "e", "f"}, "a, b, c, and 3 more"},
	} {
		if got := FirstFew(tc.in, ", ", name); got != tc.want {
			t.Errorf("FirstFew(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestBounded: a long key or error is cut to a bounded length however
// much it grows when escaped (a control byte escapes to four), and says
// how long it was; a short one is unchanged.
func TestBounded(t *testing.T) {
	control := strings.Repeat("\x00", 450_000)
	for _, tc := range []struct {
		name, got string
		limit     int
		quoted    bool
	}{
		{"control-byte key", Bytes([]byte(control)), MaxKey, true},
		{"printable key", Bytes([]byte(strings.Repeat("k", 100_000))), MaxKey, false},
		{"multi-byte key", Bytes([]byte("kk" + strings.Repeat("日本", 100_000))), MaxKey, false},
		{"control-byte error", Escape(control), MaxText, true},
		{"printable error", Escape(strings.Repeat("e", 1<<20)), MaxText, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, rest, ok := strings.Cut(tc.got, "... (")
			if !ok || !strings.HasSuffix(rest, " bytes)") {
				t.Fatalf("got %.80q..., want it cut with a length", tc.got)
			}
			if len(text) > tc.limit {
				t.Fatalf("cut text is %d bytes, want at most %d", len(text), tc.limit)
			}
			if len(text) < tc.limit/2 {
				t.Fatalf("cut text is %d bytes: far shorter than the bound %d", len(text), tc.limit)
			}
			if quoted := strings.HasPrefix(text, `"`); quoted != tc.quoted {
				t.Fatalf("cut text quoted %v, want %v: %.80q", quoted, tc.quoted, text)
			}
			if strings.ContainsRune(text, 0) || strings.ContainsRune(text, utf8.RuneError) {
				t.Fatalf("cut text has a raw control byte or a broken rune: %.80q", text)
			}
		})
	}
	if got := Bytes([]byte("key-3")); got != "key-3" {
		t.Errorf("short key: %q", got)
	}
	if got := Escape("\x1b[2J"); got != `"\x1b[2J"` {
		t.Errorf("short error: %q", got)
	}
}
