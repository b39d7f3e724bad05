package schedule

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestKeyTableModel: whatever the order of puts and removes, of keys that
// share hashes (the test key's hash is its length) or not, the table
// finds each key's queue and no other, counts its queues, and yields each
// once.
func TestKeyTableModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tab := newKeyTable[key, tj]()
		model := map[key]*keyQueue[key, tj]{}
		// Keys of lengths 1 to 3 over two letters: many share a hash.
		k := rapid.Custom(func(t *rapid.T) key {
			return key(rapid.StringOfN(rapid.RuneFrom([]rune("ab")), 1, 3, -1).Draw(t, "key"))
		})
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			x := k.Draw(t, "k")
			if q := model[x]; q != nil {
				tab.remove(q)
				delete(model, x)
			} else {
				q := &keyQueue[key, tj]{key: x}
				tab.put(q)
				model[x] = q
			}
			check := k.Draw(t, "check")
			if got, want := tab.get(check), model[check]; got != want {
				t.Fatalf("get(%q) = %p, want %p", check, got, want)
			}
			if tab.len() != len(model) {
				t.Fatalf("len %d, want %d", tab.len(), len(model))
			}
			seen := map[key]bool{}
			for q := range tab.all() {
				if seen[q.key] || model[q.key] != q {
					t.Fatalf("all yields %q twice or not its queue", q.key)
				}
				seen[q.key] = true
			}
			if len(seen) != len(model) {
				t.Fatalf("all yields %d queues, want %d", len(seen), len(model))
			}
		}
	})
}

// TestKeyTableAllStops: all stops when its caller breaks out of the loop,
// within a chain too.
func TestKeyTableAllStops(t *testing.T) {
	tab := newKeyTable[key, tj]()
	for i := range 10 {
		tab.put(&keyQueue[key, tj]{key: key(fmt.Sprint(i))}) // one hash: one chain
	}
	n := 0
	for range tab.all() {
		if n++; n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("looped %d times, want 3", n)
	}
}
