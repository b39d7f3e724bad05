package ledger

import (
	"errors"
	"testing"
)

// TestShelve: a shelved record holds the watermark, is not in flight, and
// runs once when it is fetched again; shelving a record that is not in
// flight is refused.
func TestShelve(t *testing.T) {
	st, err := NewState(Full, Entry{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	for o := int64(10); o < 13; o++ {
		if v, _ := st.Observe(o, 7); v != Run {
			t.Fatalf("observe %d: %v", o, v)
		}
	}
	if err := st.Shelve(11, 7); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(10, 7); err != nil {
		t.Fatal(err)
	}
	if err := st.Complete(12, 7); err != nil {
		t.Fatal(err)
	}
	if w := st.Watermark(); w != 11 {
		t.Fatalf("watermark %d, want 11 (the shelved record)", w)
	}
	if err := st.Complete(11, 7); !errors.Is(err, ErrNotDispatched) {
		t.Fatalf("complete of a shelved record: %v, want ErrNotDispatched", err)
	}
	if err := st.Shelve(11, 7); !errors.Is(err, ErrNotDispatched) {
		t.Fatalf("shelving twice: %v, want ErrNotDispatched", err)
	}
	// Fetched again after a seek back: 10 and 12 are done, 11 runs.
	for o, want := range map[int64]Verdict{10: Skip, 11: Run, 12: Skip} {
		if v, _ := st.Observe(o, 7); v != want {
			t.Fatalf("observe %d again: %v, want %v", o, v, want)
		}
	}
	if err := st.Complete(11, 7); err != nil {
		t.Fatal(err)
	}
	if w := st.Watermark(); w != 13 {
		t.Fatalf("watermark %d, want 13", w)
	}
	if p := st.Entry().PendingCount(); p != 0 {
		t.Fatalf("%d pending, want 0", p)
	}
}
