package schema

import "testing"

// TestForeign checks that every key the schema builds lies outside the
// foreign ranges and that keys of anything else lie inside one.
func TestForeign(t *testing.T) {
	t.Parallel()
	s := Group{Prefix: "/keyshare", Name: "g"}.Keys()
	inForeign := func(k string) bool {
		for _, r := range s.Foreign() {
			if r.From <= k && k < r.To {
				return true
			}
		}
		return false
	}
	own := []string{
		s.Member("m1"), s.Election() + "/694d7c2a1b", s.Generation(), s.Paused(),
		s.Range("orders", 3, 100), s.LedgerEntry("orders", 3, 100), s.Commit("orders", 3),
		s.StuckRange("orders", 3, 100), s.LostRange("orders", 3, 100, 7), s.Topic("orders"),
		s.Load("m1"), s.Leaving("m1"), s.Handoff("m1"), s.Subscription("m1"), s.HotKeys("m1"), s.KeyOp("orders", 3, 7, []byte("k/1")),
	}
	for _, k := range own {
		if inForeign(k) {
			t.Errorf("schema key %q lies in a foreign range", k)
		}
	}
	foreign := []string{
		"/keyshare/g/", // the root itself is no key of the schema
		"/keyshare/g/orders/00000/0000000000",
		"/keyshare/g/g2/members/m1", // a group nested inside
		"/keyshare/g/generation2",
		"/keyshare/g/generation/x",
		"/keyshare/g/members", // without its slash
		"/keyshare/g/membersx/m1",
		"/keyshare/g/zzz",
		"/keyshare/g/\xff",
	}
	for _, k := range foreign {
		if !inForeign(k) {
			t.Errorf("key %q is not the schema's, but no foreign range holds it", k)
		}
	}
	for _, k := range []string{"/keyshare/g", "/keyshare/g0", "/keyshare/h/members/m1", "/keyshare/f/members/m1"} {
		if inForeign(k) {
			t.Errorf("key %q is outside the root, but a foreign range holds it", k)
		}
	}
	rs := s.Foreign()
	for i := 1; i < len(rs); i++ {
		if rs[i-1].To > rs[i].From || rs[i].From >= rs[i].To {
			t.Fatalf("foreign ranges overlap or are empty: %q", rs)
		}
	}
}

func TestEnclosing(t *testing.T) {
	t.Parallel()
	var roots []string
	for _, e := range (Group{Prefix: "/keyshare/g", Name: "ledger"}).Keys().Enclosing() {
		roots = append(roots, e.Root())
	}
	want := []string{"/", "/keyshare/", "/keyshare/g/"}
	if len(roots) != len(want) {
		t.Fatalf("Enclosing roots %q, want %q", roots, want)
	}
	for i := range want {
		if roots[i] != want[i] {
			t.Fatalf("Enclosing roots %q, want %q", roots, want)
		}
	}
}
