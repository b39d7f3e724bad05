// Package textsafe makes text from outside keyshare (record keys, handler
// errors, names read from etcd) safe to show on an operator's terminal, in
// a log line, an etcd value or a record header: a string with any
// non-printable rune (a control character such as ESC, which starts a
// terminal escape sequence, a C1 control, or invalid UTF-8) is shown
// Go-quoted, "\x1b[2J" as "\"\\x1b[2J\"", and a long one is cut to a
// bounded length (MaxKey for a key or a name, MaxText for other text) with
// its full length after it: "\"\\x00\\x00...\"... (450000 bytes)".
// Ordinary short text is unchanged, so "key-3" stays key-3. Bidi controls
// (U+202E RIGHT-TO-LEFT OVERRIDE and the like) are not printable, so text
// holding one is quoted too: it could otherwise reorder what the operator
// reads. Quote always quotes, for an error message; Clip only cuts;
// Head shows a key of which only the first bytes were kept (a hot key's
// bounded copy), with the whole key's length; and JSON escapes in
// encoded JSON what its encoder leaves raw. FirstFew keeps
// a log line about thousands of items (ranges, partitions) to its first
// few and a count.
//
//	fmt.Fprintf(out, "held by key %s\n", textsafe.Bytes(m.Key))
package textsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Bounds on the escaped text Bytes and Escape return (the length note of a
// cut string comes on top). A key names a record in a log line or a stuck
// report, and a name (member id, host, topic) a thing in etcd; a few
// hundred bytes identify either. An error keeps room for the top
// of a panic's stack. Without a bound a 450 KB key of control bytes grew to
// 2.25 MB escaped: etcd refused the stuck report holding it and each log
// line about it was megabytes long.
const (
	MaxKey  = 256
	MaxText = 4096
)

// Escape returns s unchanged if every rune of it is printable
// (strconv.IsPrint, with ASCII space allowed), else strconv.Quote(s); cut
// to MaxText bytes if longer.
func Escape(s string) string { return Cut(s, MaxText) }

// Bytes is Escape for a record key, cut to MaxKey bytes.
func Bytes(b []byte) string {
	// Only the head is ever shown: convert no more of a large key.
	return cut(string(b[:min(len(b), MaxKey)]), len(b), MaxKey, escape)
}

// Head is Bytes for a key of which only head, its first bytes, was kept
// (a bounded copy): total is the key's length and n the bound of the
// escaped text, as Cut's.
func Head(head []byte, total, n int) string {
	return cut(string(head[:min(len(head), n)]), total, n, escape)
}

// Cut is Escape with a bound of n bytes: a string whose escaped form is
// longer is cut at a rune boundary so that the escaped head fits in n, and
// "... (L bytes)" is added, L being the length of s.
func Cut(s string, n int) string {
	return cut(s[:min(len(s), n)], len(s), n, escape)
}

// Quote is strconv.Quote cut as Bytes cuts: for a name or key in an error
// message, where it reads best quoted whatever it holds.
func Quote(s string) string {
	return cut(s[:min(len(s), MaxKey)], len(s), MaxKey, strconv.Quote)
}

// Clip cuts s as Cut does but does not escape it: for output whose format
// escapes by its own rules (JSON, then the JSON function).
func Clip(s string, n int) string {
	return cut(s[:min(len(s), n)], len(s), n, func(s string) string { return s })
}

// cut escapes head, the first bytes of a string of total bytes, to at
// most n bytes.
func cut(head string, total, n int, escape func(string) string) string {
	p := len(head)
	for {
		// Keep a multi-byte rune whole, or a printable key would be quoted.
		for i := 1; i < utf8.UTFMax && p > 0 && p < len(head) && !utf8.RuneStart(head[p]); i++ {
			p--
		}
		e := escape(head[:p])
		if len(e) <= n {
			if p == total {
				return e
			}
			return fmt.Sprintf("%s... (%d bytes)", e, total)
		}
		// Escaping grew the text: take a head shorter by the same factor.
		p = min(p-1, p*n/len(e))
	}
}

func escape(s string) string {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
		i += n
	}
	return s
}

// JSON escapes, in the output of encoding/json, each non-ASCII rune that
// Escape would quote as \uXXXX: the encoder escapes ASCII control
// characters (and U+2028, U+2029) but passes C1 controls such as U+009B
// (a CSI on some terminals) and bidi controls such as U+202E raw. Outside
// its strings encoded JSON is ASCII, so every such rune is in a string and
// the result decodes to the same values.
func JSON(b []byte) []byte {
	var out []byte
	done := 0
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if strconv.IsPrint(r) && n > 1 {
			i += n
			continue
		}
		if out == nil {
			out = make([]byte, 0, len(b)+16)
		}
		out = append(out, b[done:i]...)
		// A rune above U+FFFF is written as its UTF-16 surrogate pair;
		// an invalid byte (encoding/json writes none) as U+FFFD, which a
		// decoder would read in its place.
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
		done = i
	}
	if out == nil {
		return b
	}
	return append(out, b[done:]...)
}

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
