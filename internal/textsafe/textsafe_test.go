package textsafe

import "testing"

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
