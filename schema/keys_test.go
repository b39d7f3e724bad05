package schema

import (
	"slices"
	"strings"
	"testing"
)

func TestSchemaKeys(t *testing.T) {
	t.Parallel()
	s := Group{Prefix: "/keyshare/", Name: "g"}.Keys()
	tests := []struct{ name, got, want string }{
		{"root", s.Root(), "/keyshare/g/"},
		{"members", s.Members(), "/keyshare/g/members/"},
		{"member", s.Member("m1"), "/keyshare/g/members/m1"},
		{"election", s.Election(), "/keyshare/g/election"},
		{"generation", s.Generation(), "/keyshare/g/generation"},
		{"ranges", s.Ranges(), "/keyshare/g/ranges/"},
		{"range", s.Range("orders", 3, 100), "/keyshare/g/ranges/orders/00003/0000000100"},
		{"range at the last hash", s.Range("orders", 0, 1<<32-1), "/keyshare/g/ranges/orders/00000/4294967295"},
		{"ledger", s.Ledger(), "/keyshare/g/ledger/"},
		{"ledger entry", s.LedgerEntry("orders", 3, 100), "/keyshare/g/ledger/orders/00003/0000000100"},
		{"commits", s.Commits(), "/keyshare/g/commits/"},
		{"commit", s.Commit("orders", 12), "/keyshare/g/commits/orders/00012"},
		{"prefix without slash", Group{Prefix: "/ks", Name: "g"}.Keys().Root(), "/ks/g/"},
		{"load", s.Load("m1"), "/keyshare/g/load/m1"},
		{"hot keys", s.HotKeys("m1"), "/keyshare/g/hotkeys/m1"},
		{"key op", s.KeyOp("orders", 3, 7, []byte("k/1?")), "/keyshare/g/keyops/orders/00003/0000000007/ay8xPw"},
		{"key op of an empty key", s.KeyOp("orders", 3, 7, []byte{}), "/keyshare/g/keyops/orders/00003/0000000007/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

// TestKeysSortAsNumbers checks that fixed-width numbers make etcd's byte
// order the numeric order: by partition, then by first hash.
func TestKeysSortAsNumbers(t *testing.T) {
	t.Parallel()
	s := Group{Prefix: "/keyshare", Name: "g"}.Keys()
	type pl struct {
		p  int32
		lo uint64
	}
	ordered := []pl{{0, 0}, {0, 9}, {0, 10}, {0, 1 << 31}, {0, 1<<32 - 1}, {2, 0}, {9, 5}, {10, 0}, {99999, 0}}
	for _, build := range []struct {
		name string
		key  func(p int32, lo uint64) string
	}{
		{"range", func(p int32, lo uint64) string { return s.Range("t", p, lo) }},
		{"ledger entry", func(p int32, lo uint64) string { return s.LedgerEntry("t", p, lo) }},
		{"commit", func(p int32, _ uint64) string { return s.Commit("t", p) }},
	} {
		t.Run(build.name, func(t *testing.T) {
			var ks []string
			for _, x := range ordered {
				ks = append(ks, build.key(x.p, x.lo))
			}
			if !slices.IsSorted(ks) {
				t.Fatalf("keys in numeric order do not sort: %q", ks)
			}
			width := len(ks[0])
			for _, k := range ks {
				if len(k) != width {
					t.Fatalf("key %q is %d bytes, %q is %d: want fixed width", k, len(k), ks[0], width)
				}
			}
		})
	}
}

func TestParseRangeKey(t *testing.T) {
	t.Parallel()
	s := Group{Prefix: "/keyshare", Name: "g"}.Keys()
	for _, c := range []struct {
		topic string
		p     int32
		lo    uint64
	}{
		{"orders", 0, 0}, {"orders", 3, 100}, {"a.b-c_d", 99999, 1<<32 - 1}, {"t", 1<<31 - 1, 7},
	} {
		for _, prefix := range []string{s.Ranges(), s.Ledger()} {
			key := s.Range(c.topic, c.p, c.lo)
			if prefix == s.Ledger() {
				key = s.LedgerEntry(c.topic, c.p, c.lo)
			}
			topic, p, lo, err := ParseRangeKey(prefix, key)
			if err != nil || topic != c.topic || p != c.p || lo != c.lo {
				t.Errorf("ParseRangeKey(%q) = %q, %d, %d, %v; want %q, %d, %d", key, topic, p, lo, err, c.topic, c.p, c.lo)
			}
		}
	}

	bad := []struct{ name, key, want string }{
		{"other prefix", s.LedgerEntry("t", 1, 2), "is not under"},
		{"other group", Group{Prefix: "/keyshare", Name: "h"}.Keys().Range("t", 1, 2), "is not under"},
		{"prefix only", s.Ranges(), "want"},
		{"no lo", s.Ranges() + "t/00001", "want"},
		{"extra element", s.Ranges() + "t/00001/0000000002/x", "want"},
		{"topic with slash", s.Range("a/b", 1, 2), "want"},
		{"no topic", s.Ranges() + "/00001/0000000002", "want"},
		{"partition not a number", s.Ranges() + "t/x/0000000002", `bad partition "x"`},
		{"negative partition", s.Ranges() + "t/-0001/0000000002", `bad partition "-0001"`},
		{"partition past int32", s.Ranges() + "t/2147483648/0000000002", `bad partition "2147483648"`},
		{"empty partition", s.Ranges() + "t//0000000002", `bad partition ""`},
		{"lo not a number", s.Ranges() + "t/00001/abc", `bad range start "abc"`},
		{"negative lo", s.Ranges() + "t/00001/-1", `bad range start "-1"`},
		{"lo past the hash space", s.Ranges() + "t/00001/4294967296", `bad range start "4294967296"`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := ParseRangeKey(s.Ranges(), tt.key)
			if err == nil {
				t.Fatalf("ParseRangeKey(%q) = nil error, want one saying %q", tt.key, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("error %q, want it to name the key and say %q", err, tt.want)
			}
		})
	}
}

func TestParseCommitKey(t *testing.T) {
	t.Parallel()
	s := Group{Prefix: "/keyshare", Name: "g"}.Keys()
	for _, c := range []struct {
		topic string
		p     int32
	}{{"orders", 0}, {"orders", 12}, {"x", 1<<31 - 1}} {
		key := s.Commit(c.topic, c.p)
		topic, p, err := ParseCommitKey(s.Commits(), key)
		if err != nil || topic != c.topic || p != c.p {
			t.Errorf("ParseCommitKey(%q) = %q, %d, %v; want %q, %d", key, topic, p, err, c.topic, c.p)
		}
	}
	bad := []struct{ name, key, want string }{
		{"other prefix", s.Range("t", 1, 0), "is not under"},
		{"prefix only", s.Commits(), "want"},
		{"no partition", s.Commits() + "t", "want"},
		{"empty partition", s.Commits() + "t/", "want"},
		{"no topic", s.Commits() + "/00001", "want"},
		{"extra element", s.Commits() + "t/00001/2", "want"},
		{"partition not a number", s.Commits() + "t/one", "want"},
		{"negative partition", s.Commits() + "t/-1", "want"},
		{"partition past int32", s.Commits() + "t/2147483648", "want"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseCommitKey(s.Commits(), tt.key)
			if err == nil {
				t.Fatalf("ParseCommitKey(%q) = nil error, want one saying %q", tt.key, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.key) {
				t.Fatalf("error %q, want it to name the key and say %q", err, tt.want)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "orders", "m-1.example_com", "ключ", strings.Repeat("x", 249)} {
		if err := CheckName("topic", ok); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", ok, err)
		}
	}
	tests := []struct{ name, value, want string }{
		{"empty", "", "topic is empty"},
		{"slash", "a/b", `topic "a/b" contains '/' or NUL`},
		{"only a slash", "/", "contains '/' or NUL"},
		{"NUL", "a\x00b", "contains '/' or NUL"},
		{"too long", strings.Repeat("x", 250), "longer than 249 bytes"},
		{"too long in bytes, not runes", strings.Repeat("é", 125), "longer than 249 bytes"},
		// A name read from etcd may be megabytes: the error quotes its
		// head and its size.
		{"a megabyte", strings.Repeat("x", 1<<20), `xxx"... (1048576 bytes) is longer than 249 bytes`},
		{"a megabyte with a slash", "a/" + strings.Repeat("x", 1<<20), `xxx"... (1048578 bytes) contains '/' or NUL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckName("topic", tt.value)
			if err == nil || !strings.Contains(err.Error(), tt.want) || len(err.Error()) > 1024 {
				t.Fatalf("CheckName(%.80q) = %.400v, want an error of at most 1 KiB saying %q", tt.value, err, tt.want)
			}
		})
	}
}

// TestParseKeysCanonical: the parsers accept only keys the schema writes,
// so that one range cannot have two keys.
func TestParseKeysCanonical(t *testing.T) {
	t.Parallel()
	s := Group{Prefix: "/keyshare", Name: "g"}.Keys()
	for _, key := range []string{s.Ranges() + "t/1/5", s.Ranges() + "t/+0001/0000000005", s.Ranges() + "t/00001/5"} {
		if _, _, _, err := ParseRangeKey(s.Ranges(), key); err == nil {
			t.Errorf("ParseRangeKey(%q) = nil error, want one: the key is not in the schema's form", key)
		}
	}
	for _, key := range []string{s.Commits() + "t/1", s.Commits() + "t/+0001"} {
		if _, _, err := ParseCommitKey(s.Commits(), key); err == nil {
			t.Errorf("ParseCommitKey(%q) = nil error, want one: the key is not in the schema's form", key)
		}
	}
}

func TestLostKey(t *testing.T) {
	t.Parallel()
	s := Group{Prefix: "/keyshare", Name: "g"}.Keys()
	key := s.LostRange("orders", 3, 2147483648, 1200)
	if want := "/keyshare/g/lost/orders/00003/2147483648/00000000000000001200"; key != want {
		t.Fatalf("LostRange = %q, want %q", key, want)
	}
	topic, p, lo, start, err := ParseLostKey(s.Lost(), key)
	if err != nil || topic != "orders" || p != 3 || lo != 2147483648 || start != 1200 {
		t.Fatalf("ParseLostKey(%q) = %q, %d, %d, %d, %v", key, topic, p, lo, start, err)
	}
	for _, bad := range []string{
		s.Lost() + "orders/00003/2147483648",                      // no log start
		s.Lost() + "orders/00003/2147483648/1200",                 // not %020d
		s.Lost() + "orders/00003/2147483648/-0000000000000000001", // negative
		s.Lost() + "orders/3/2147483648/00000000000000001200",     // partition not %05d
		"/other/orders/00003/2147483648/00000000000000001200",
	} {
		if _, _, _, _, err := ParseLostKey(s.Lost(), bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseLostKey(%q) = %v, want an error naming the key", bad, err)
		}
	}
}
