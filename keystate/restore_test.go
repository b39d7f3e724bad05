package keystate_test

import (
	"errors"
	"testing"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

func ent(key string, value string, applied, fence int64) keystate.Entry {
	return keystate.Entry{Key: []byte(key), Value: []byte(value), Applied: applied, Fence: fence}
}

func tomb(key string, applied, fence int64) keystate.Entry {
	return keystate.Entry{Key: []byte(key), Deleted: true, Applied: applied, Fence: fence}
}

func restore(t *testing.T, r ledger.HashRange, log ...keystate.Entry) (*keystate.Table, []keystate.Entry) {
	t.Helper()
	rs, err := keystate.NewRestore(r, keystate.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range log {
		if err := rs.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	tb, repairs, err := rs.Table(10)
	if err != nil {
		t.Fatal(err)
	}
	return tb, repairs
}

func TestRestoreRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		log     []keystate.Entry
		want    keystate.Entry // the key's state; Deleted for a deleted key
		repairs int
	}{
		{"in order", []keystate.Entry{ent("k", "a", 1, 1), ent("k", "b", 2, 1)}, ent("k", "b", 2, 1), 0},
		{"a new owner's change", []keystate.Entry{ent("k", "a", 1, 1), ent("k", "b", 2, 9)}, ent("k", "b", 2, 9), 0},
		{"a late stale change", []keystate.Entry{ent("k", "new", 5, 9), ent("k", "old", 3, 1)}, ent("k", "new", 5, 9), 1},
		{"a re-run by the next owner", []keystate.Entry{ent("k", "mine", 5, 1), ent("k", "theirs", 5, 9)}, ent("k", "theirs", 5, 9), 0},
		{"a re-run landing late", []keystate.Entry{ent("k", "theirs", 5, 9), ent("k", "mine", 5, 1)}, ent("k", "theirs", 5, 9), 1},
		{"a stale member ahead", []keystate.Entry{ent("k", "owner", 5, 9), ent("k", "ahead", 7, 1)}, ent("k", "ahead", 7, 1), 0},
		{"a repair after a stale change", []keystate.Entry{ent("k", "new", 5, 9), ent("k", "old", 3, 1), ent("k", "new", 5, 9)}, ent("k", "new", 5, 9), 0},
		{"a deletion", []keystate.Entry{ent("k", "a", 1, 1), tomb("k", 2, 1)}, tomb("k", 2, 1), 0},
		{"a stale change after a deletion", []keystate.Entry{tomb("k", 4, 9), ent("k", "old", 3, 1)}, tomb("k", 4, 9), 1},
		{"a value after a deletion", []keystate.Entry{tomb("k", 4, 1), ent("k", "again", 6, 1)}, ent("k", "again", 6, 1), 0},
		{"an operator's deletion", []keystate.Entry{ent("k", "a", 4, 3), tomb("k", 4, 3)}, tomb("k", 4, 3), 0},
		{"an operator's deletion read before the value", []keystate.Entry{tomb("k", 4, 3), ent("k", "a", 4, 3)}, tomb("k", 4, 3), 1},
		{"a deletion of an older change", []keystate.Entry{ent("k", "a", 4, 3), tomb("k", 4, 2)}, ent("k", "a", 4, 3), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, repairs := restore(t, ledger.Full, tc.log...)
			if tc.repairs > 0 {
				tc.want.Fence = 10 // repaired under the restore's token
			}
			got, ok := entry(t, tb, []byte("k"))
			if !ok || !sameEntry(got, tc.want) {
				t.Fatalf("restored %+v, %v; want %+v", got, ok, tc.want)
			}
			if v, ok := get(t, tb, []byte("k")); ok == tc.want.Deleted || string(v) != string(tc.want.Value) {
				t.Fatalf("Get = %q, %v", v, ok)
			}
			if len(repairs) != tc.repairs {
				t.Fatalf("%d repairs %+v, want %d", len(repairs), repairs, tc.repairs)
			}
			if len(repairs) == 1 && !sameEntry(repairs[0], tc.want) {
				t.Fatalf("repair %+v, want the winning entry %+v", repairs[0], tc.want)
			}
		})
	}
}

func TestRestoreKeepsItsRange(t *testing.T) {
	lo := ledger.HashRange{Lo: 0, Hi: 1 << 31}
	in, out := keyIn(lo, 0), keyIn(ledger.HashRange{Lo: 1 << 31, Hi: ledger.HashSpace}, 0)
	tb, _ := restore(t, lo, keystate.Entry{Key: in, Value: []byte("a"), Applied: 1, Fence: 1},
		keystate.Entry{Key: out, Value: []byte("b"), Applied: 2, Fence: 1})
	if _, ok := get(t, tb, in); !ok || tb.Len() != 1 || tb.Range() != lo {
		t.Fatalf("restored %d keys over %s, want only the key in %s", tb.Len(), tb.Range(), lo)
	}
	if _, err := tb.Put(in, []byte("c"), 1, 2); err == nil {
		t.Fatal("a restored table re-applies offset 1")
	}
}

func TestRestoreMemoryBound(t *testing.T) {
	rs, err := keystate.NewRestore(ledger.Full, keystate.Config{MaxBytes: 2 * keystate.EntryOverhead})
	if err != nil {
		t.Fatal(err)
	}
	if err := rs.Add(ent("a", "", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := rs.Add(ent("b", "", 2, 1)); err == nil {
		t.Fatal("a restore crossed MaxBytes without an error")
	} else if me := (*keystate.MemoryError)(nil); !errors.As(err, &me) || me.Size != 2*keystate.EntryOverhead+2 {
		t.Fatalf("err = %v, want a *MemoryError of size %d", err, 2*keystate.EntryOverhead+2)
	}
	if err := rs.Add(keystate.Entry{Value: []byte("x")}); !errors.Is(err, keystate.ErrNullKey) {
		t.Fatalf("Add of a null key: %v", err)
	}
}
