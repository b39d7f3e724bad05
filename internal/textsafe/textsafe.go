// Package textsafe makes text from outside keyshare (record keys, handler
// errors, names read from etcd) safe to show on an operator's terminal or
// in a log line: a string with any non-printable rune (a control character
// such as ESC, which starts a terminal escape sequence, a C1 control, or
// invalid UTF-8) is shown Go-quoted, "\x1b[2J" as "\"\\x1b[2J\"". Ordinary
// text is unchanged, so "key-3" stays key-3. FirstFew keeps a log line about
// thousands of items (ranges, partitions) to its first few and a count.
//
//	fmt.Fprintf(out, "held by key %s\n", textsafe.Escape(string(m.Key)))
package textsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Escape returns s unchanged if every rune of it is printable
// (strconv.IsPrint, with ASCII space allowed), else strconv.Quote(s).
func Escape(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
		i += n
	}
	return s
}

// Bytes is Escape for a byte slice (a record key).
func Bytes(b []byte) string { return Escape(string(b)) }

// FirstFew joins the names of the first three items, with a count of the
// rest, for a log line about many items: "a, b, c, and 4093 more".
func FirstFew[T any](items []T, sep string, name func(T) string) string {
	var b strings.Builder
	for i, it := range items {
		if i == 3 {
			fmt.Fprintf(&b, "%sand %d more", sep, len(items)-i)
			break
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(name(it))
	}
	return b.String()
}
