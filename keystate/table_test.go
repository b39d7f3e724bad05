package keystate_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

func newTable(t *testing.T, r ledger.HashRange, maxBytes int64) *keystate.Table {
	t.Helper()
	cfg := keystate.DefaultConfig()
	if maxBytes > 0 {
		cfg.MaxBytes = maxBytes
	}
	tb, err := keystate.NewTable(r, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestTablePutGetDelete(t *testing.T) {
	tb := newTable(t, ledger.Full, 0)
	k := []byte("order-1")
	if _, ok := get(t, tb, k); ok || seen(t, tb, k, 0) {
		t.Fatal("an empty table knows a key")
	}
	val := []byte("v1")
	e, err := tb.Put(k, val, 10, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !sameEntry(e, keystate.Entry{Key: k, Value: []byte("v1"), Applied: 10, Fence: 3}) {
		t.Fatalf("Put returned %+v", e)
	}
	val[0] = 'X' // the table keeps its own copy
	if v, ok := get(t, tb, k); !ok || string(v) != "v1" {
		t.Fatalf("Get = %q, %v; want v1", v, ok)
	}
	for off, want := range map[int64]bool{9: true, 10: true, 11: false} {
		if got := seen(t, tb, k, off); got != want {
			t.Errorf("Seen(offset %d) = %v with applied 10, want %v", off, got, want)
		}
	}
	e, err = tb.Delete(k, 12, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Deleted || e.Value != nil || e.Applied != 12 {
		t.Fatalf("Delete returned %+v, want a tombstone at 12", e)
	}
	if _, ok := get(t, tb, k); ok {
		t.Fatal("Get finds a deleted key")
	}
	if a, ok := applied(t, tb, k); !ok || a != 12 || !seen(t, tb, k, 12) || seen(t, tb, k, 13) {
		t.Fatalf("a deleted key's applied offset = %d, %v; want 12 kept for the skip rule", a, ok)
	}
	if tb.Len() != 1 || tb.Bytes() != int64(len(k))+keystate.EntryOverhead {
		t.Fatalf("a deleted key: Len %d, Bytes %d; want 1 and %d", tb.Len(), tb.Bytes(), int64(len(k))+keystate.EntryOverhead)
	}
	if _, err := tb.Put(k, nil, 13, 4); err != nil {
		t.Fatal(err)
	}
	if v, ok := get(t, tb, k); !ok || v == nil || len(v) != 0 {
		t.Fatalf("Get after Put of a nil value = %q, %v; want an empty value", v, ok)
	}
}

func TestTableRefuses(t *testing.T) {
	lower := ledger.HashRange{Lo: 0, Hi: 1 << 31}
	in, out := keyIn(lower, 0), keyIn(ledger.HashRange{Lo: 1 << 31, Hi: ledger.HashSpace}, 0)
	for _, tc := range []struct {
		name    string
		change  func(*keystate.Table) error
		wantErr string
	}{
		{"re-applied offset", func(tb *keystate.Table) error { _, err := tb.Put(in, []byte("x"), 10, 5); return err }, "at or below the key's applied offset 10"},
		{"older offset", func(tb *keystate.Table) error { _, err := tb.Delete(in, 9, 5); return err }, "at or below"},
		{"lower fence", func(tb *keystate.Table) error { _, err := tb.Put(in, []byte("x"), 11, 4); return err }, "below the key's fencing token 5"},
		{"key outside the range", func(tb *keystate.Table) error { _, err := tb.Put(out, []byte("x"), 11, 5); return err }, "outside the table's range [0,2147483648)"},
		{"negative offset", func(tb *keystate.Table) error { _, err := tb.Put([]byte("n"), []byte("x"), -1, 5); return err }, "negative"},
		{"negative fence", func(tb *keystate.Table) error { _, err := tb.Delete(in, 11, -1); return err }, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(t, lower, 0)
			if _, err := tb.Put(in, []byte("v"), 10, 5); err != nil {
				t.Fatal(err)
			}
			err := tc.change(tb)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
			if v, _ := get(t, tb, in); string(v) != "v" {
				t.Fatalf("a refused change left value %q", v)
			}
			if a, _ := applied(t, tb, in); a != 10 {
				t.Fatalf("a refused change left applied offset %d", a)
			}
		})
	}
	tb := newTable(t, ledger.Full, 0)
	if _, err := tb.Put(nil, []byte("v"), 1, 1); !errors.Is(err, keystate.ErrNullKey) {
		t.Fatalf("Put of a null key: %v, want ErrNullKey", err)
	}
}

func TestTableMemoryBound(t *testing.T) {
	const max = 3*keystate.EntryOverhead + 30
	tb := newTable(t, ledger.Full, max)
	for i := range 3 {
		if _, err := tb.Put(fmt.Appendf(nil, "k%d", i), []byte("12345678"), int64(i), 1); err != nil {
			t.Fatal(err) // 3 × (2 + 8 + overhead) = max
		}
	}
	if tb.Bytes() != max {
		t.Fatalf("Bytes = %d, want %d", tb.Bytes(), max)
	}
	_, err := tb.Put([]byte("k0"), []byte("123456789"), 5, 1)
	var me *keystate.MemoryError
	if !errors.As(err, &me) || me.Size != max+1 || me.MaxBytes != max {
		t.Fatalf("a value one byte larger: %v, want a *MemoryError of size %d over %d", err, max+1, max)
	}
	for _, want := range []string{fmt.Sprint(max + 1), fmt.Sprint(max), `"k0"`, "raise MaxBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if v, _ := get(t, tb, []byte("k0")); string(v) != "12345678" || tb.Bytes() != max {
		t.Fatalf("a refused change left %q, Bytes %d", v, tb.Bytes())
	}
	// Smaller values make room; a deleted key keeps its own.
	if _, err := tb.Put([]byte("k0"), []byte("1"), 6, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Delete([]byte("k1"), 7, 1); err != nil {
		t.Fatal(err)
	}
	if want := int64(max - 7 - 8); tb.Bytes() != want {
		t.Fatalf("Bytes = %d, want %d", tb.Bytes(), want)
	}
	if _, err := keystate.NewTable(ledger.Full, keystate.Config{}); err == nil || !strings.Contains(err.Error(), "MaxBytes 0") {
		t.Fatalf("NewTable with MaxBytes 0: %v, want an error naming it", err)
	}
}

func TestObserve(t *testing.T) {
	k := []byte("k")
	mine := keystate.Entry{Key: k, Value: []byte("mine"), Applied: 10, Fence: 5}
	for _, tc := range []struct {
		name   string
		e      keystate.Entry
		repair bool
		after  keystate.Entry // the key's state after Observe
	}{
		{"my own change", mine, false, mine},
		{"my own earlier change", ent("k", "earlier", 9, 5), false, mine},
		{"a late change at a lower offset", ent("k", "old", 8, 4), true, mine},
		{"a late tombstone at a lower offset", tomb("k", 9, 4), true, mine},
		{"a late change at my offset, older fence", ent("k", "old", 10, 4), true, mine},
		{"a stale member ahead on the key", ent("k", "ahead", 12, 4), false, ent("k", "ahead", 12, 4)},
		{"a later owner's change", ent("k", "later", 10, 6), false, ent("k", "later", 10, 6)},
		{"a key I do not know", ent("other", "x", 3, 4), false, ent("other", "x", 3, 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(t, ledger.Full, 0)
			if _, err := tb.Put(k, []byte("mine"), 10, 5); err != nil {
				t.Fatal(err)
			}
			got, ok, err := tb.Observe(tc.e, 5)
			if err != nil || ok != tc.repair {
				t.Fatalf("Observe(%+v) = %v, %v; want repair %v", tc.e, ok, err, tc.repair)
			}
			if ok && !sameEntry(got, mine) {
				t.Fatalf("Observe repairs with %+v, want %+v", got, mine)
			}
			if now, _ := entry(t, tb, tc.after.Key); !sameEntry(now, tc.after) {
				t.Fatalf("after Observe the key holds %+v, want %+v", now, tc.after)
			}
		})
	}
	// An operator's deletion of the key's state is taken and handed back
	// under the observer's token: the deleter waits for that copy.
	for _, fence := range []int64{5, 3} {
		tb := newTable(t, ledger.Full, 0)
		tb.Observe(ent("k", "restored", 10, fence), 5)
		got, ok, err := tb.Observe(tomb("k", 10, fence), 5)
		if err != nil || !ok || !sameEntry(got, tomb("k", 10, 5)) {
			t.Fatalf("Observe of a deletion of a state under token %d = %+v, %v, %v; want the tombstone under token 5 to append", fence, got, ok, err)
		}
		if _, present := get(t, tb, k); present || !seen(t, tb, k, 10) || seen(t, tb, k, 11) {
			t.Fatalf("after a deletion under token %d the key still has a value, or lost its applied offset", fence)
		}
		if _, err := tb.Put(k, []byte("new"), 11, 5); err != nil {
			t.Fatalf("the owner cannot change a key an operator deleted: %v", err)
		}
	}
	tb := newTable(t, ledger.Full, 0)
	if _, ok, err := tb.Observe(keystate.Entry{Value: []byte("x")}, 5); ok || err != nil || tb.Len() != 0 {
		t.Fatalf("Observe of a null key: %v, %v, %d keys", ok, err, tb.Len())
	}
	tb.Observe(ent("k", "ahead", 12, 4), 5)
	if !seen(t, tb, k, 12) {
		t.Fatal("a stale member's lead, taken, does not make its records seen")
	}
	if _, err := tb.Put(k, []byte("x"), 13, 3); err == nil {
		t.Fatal("Put under a token below the key's taken token was accepted")
	}
	// A repair of a state another owner wrote is made under the
	// observer's token, and none is made by a member a later owner
	// follows.
	tb = newTable(t, ledger.Full, 0)
	tb.Observe(ent("k", "restored", 10, 3), 5)
	if got, ok, _ := tb.Observe(ent("k", "late", 8, 2), 5); !ok || !sameEntry(got, ent("k", "restored", 10, 5)) {
		t.Fatalf("repair of a restored state: %+v, %v; want it under token 5", got, ok)
	}
	if _, ok, _ := tb.Observe(ent("k", "late", 9, 2), 4); ok {
		t.Fatal("a member under token 4 repairs a key written under token 5")
	}
	small := newTable(t, ledger.Full, keystate.EntryOverhead+2)
	if _, _, err := small.Observe(ent("k", "too large", 1, 1), 1); err == nil || small.Len() != 0 {
		t.Fatalf("Observe over MaxBytes: %v, %d keys", err, small.Len())
	}
}

// TestOpenTableRestoreOn: a table opened on slots that hold a member's
// copy counts what they hold and refuses a key outside its range or states
// past MaxBytes; a restore that goes on from it takes the changelog's tail
// and repairs only a key whose last record in the tail lost.
func TestOpenTableRestoreOn(t *testing.T) {
	lo, hi := ledger.HashRange{Lo: 0, Hi: 1 << 31}, ledger.HashRange{Lo: 1 << 31, Hi: ledger.HashSpace}
	a, b, c := keyIn(lo, 1), keyIn(lo, 2), keyIn(hi, 3)
	slots := keystate.NewMemorySlots()
	for _, e := range []keystate.Entry{
		{Key: a, Value: []byte("a"), Applied: 4, Fence: 2},
		{Key: b, Value: []byte("bb"), Applied: 6, Fence: 2},
	} {
		if err := slots.Set(e); err != nil {
			t.Fatal(err)
		}
	}
	tb, err := keystate.OpenTable(lo, keystate.DefaultConfig(), slots)
	if err != nil {
		t.Fatal(err)
	}
	if tb.Len() != 2 || tb.Bytes() != int64(len(a)+len(b)+3+2*keystate.EntryOverhead) {
		t.Fatalf("OpenTable counts %d keys, %d bytes", tb.Len(), tb.Bytes())
	}
	if _, err := keystate.OpenTable(hi, keystate.DefaultConfig(), slots); err == nil || !strings.Contains(err.Error(), "outside it") {
		t.Fatalf("OpenTable of %s on slots holding keys of %s: %v", hi, lo, err)
	}
	var me *keystate.MemoryError
	if _, err := keystate.OpenTable(lo, keystate.Config{MaxBytes: keystate.EntryOverhead + 10}, slots); !errors.As(err, &me) {
		t.Fatalf("OpenTable past MaxBytes: %v", err)
	}
	rs := keystate.RestoreOn(tb)
	for _, e := range []keystate.Entry{
		{Key: b, Value: []byte("bb"), Applied: 6, Fence: 2}, // read twice: nothing
		{Key: a, Value: []byte("stale"), Applied: 3, Fence: 1},
		{Key: c, Value: []byte("other range"), Applied: 7, Fence: 2},
	} {
		if err := rs.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	got, repairs, err := rs.Table(5)
	if err != nil {
		t.Fatal(err)
	}
	if len(repairs) != 1 || !bytes.Equal(repairs[0].Key, a) || repairs[0].Fence != 5 || string(repairs[0].Value) != "a" {
		t.Fatalf("repairs %+v; want key %s's state under token 5 only", repairs, a)
	}
	if v, ok := get(t, got, b); !ok || string(v) != "bb" || got.Len() != 2 {
		t.Fatalf("after the tail: %q, %v, %d keys", v, ok, got.Len())
	}
}

// keyIn returns a key whose hash is in r; i tells keys apart.
func keyIn(r ledger.HashRange, i int) []byte {
	for n := 0; ; n++ {
		k := fmt.Appendf(nil, "key-%d-%d", i, n)
		if r.Contains(ledger.Hash(k, 0)) {
			return k
		}
	}
}

// get, seen, applied and entry are the table's reads, failing the test on
// an error of its slots.
func get(t *testing.T, tb *keystate.Table, key []byte) ([]byte, bool) {
	t.Helper()
	v, ok, err := tb.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

func seen(t *testing.T, tb *keystate.Table, key []byte, offset int64) bool {
	t.Helper()
	ok, err := tb.Seen(key, offset)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func applied(t *testing.T, tb *keystate.Table, key []byte) (int64, bool) {
	t.Helper()
	a, ok, err := tb.Applied(key)
	if err != nil {
		t.Fatal(err)
	}
	return a, ok
}

func entry(t *testing.T, tb *keystate.Table, key []byte) (keystate.Entry, bool) {
	t.Helper()
	e, ok, err := tb.Entry(key)
	if err != nil {
		t.Fatal(err)
	}
	return e, ok
}
