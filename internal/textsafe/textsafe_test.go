package textsafe

import (
	"encoding/json"
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
		// Bidi controls reorder the text around them on a terminal.
		{"evil\u202egnp.exe", `"evil\u202egnp.exe"`},
		{"\u202a\u202b\u202c\u202d", `"\u202a\u202b\u202c\u202d"`},
		{"\u2066\u2067\u2068\u2069", `"\u2066\u2067\u2068\u2069"`},
		{"\u200e\u200f\u061c", `"\u200e\u200f\u061c"`},
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

// TestHead: a key of which only a head was kept reads as Bytes reads the
// whole key cut to the same bound: whole runes, the true length after the
// cut, quoted when the head holds a control byte.
func TestHead(t *testing.T) {
	for _, tc := range []struct {
		key, want string
	}{
		{"key-3", "key-3"},
		{"", ""},
		{strings.Repeat("k", 100), strings.Repeat("k", 64) + "... (100 bytes)"},
		// The kept head ends inside a rune: the rune is left out, not
		// shown broken or quoted.
		{"k" + strings.Repeat("日", 40), "k" + strings.Repeat("日", 21) + "... (121 bytes)"},
		{"\x1b[2J", `"\x1b[2J"`},
		// Quoting grew the head: a shorter one is shown, within the bound.
		{"\x1b[2J" + strings.Repeat("x", 100), `"\x1b[2J` + strings.Repeat("x", 55) + `"... (104 bytes)`},
	} {
		head := []byte(tc.key)[:min(len(tc.key), 64)]
		if got := Head(head, len(tc.key), 64); got != tc.want {
			t.Errorf("Head(%q, %d) = %q, want %q", head, len(tc.key), got, tc.want)
		}
	}
}

// TestQuoteAndClip: Quote quotes even printable text and cuts it as Bytes
// does; Clip cuts without escaping, on a rune boundary.
func TestQuoteAndClip(t *testing.T) {
	if got := Quote("m1"); got != `"m1"` {
		t.Errorf("Quote(m1) = %s", got)
	}
	long := strings.Repeat("o", 1<<20)
	if got := Quote(long); !strings.HasPrefix(got, `"ooo`) || !strings.HasSuffix(got, `"... (1048576 bytes)`) || len(got) > MaxKey+len("... (1048576 bytes)") {
		t.Errorf("Quote of 1 MB = %.80q... (%d bytes)", got, len(got))
	}
	if got := Clip("host", 8); got != "host" {
		t.Errorf("Clip(host) = %q", got)
	}
	got := Clip("\x1b"+strings.Repeat("日", 100), 10)
	if got != "\x1b日日日... (301 bytes)" {
		t.Errorf("Clip = %q, want the ESC raw and whole runes up to 10 bytes", got)
	}
}

// TestJSON: JSON escapes in encoded JSON the C1 and bidi controls and
// other unprintable runes the encoder leaves raw, and the result decodes
// to the same value; printable text (ASCII or not) is left as it is.
func TestJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ключ", `"ключ"`},
		{"evil\u202egnp", `"evil\u202egnp"`},
		{"csi\u009b2J", `"csi\u009b2J"`},
		{"\u2066\u200f\ufeff", `"\u2066\u200f\ufeff"`},
		{"tag\U000e0001", `"tag\udb40\udc01"`},
		{"esc\x1b", `"esc\u001b"`},
	} {
		enc, err := json.Marshal(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got := JSON(enc)
		if string(got) != tc.want {
			t.Errorf("JSON(%s) = %s, want %s", enc, got, tc.want)
		}
		var back string
		if err := json.Unmarshal(got, &back); err != nil || back != tc.in {
			t.Errorf("%s decodes to %q (%v), want %q", got, back, err, tc.in)
		}
	}
	if got := JSON([]byte("\"bad\xff\"")); string(got) != `"bad\ufffd"` {
		t.Errorf("invalid byte: %q", got)
	}
}
