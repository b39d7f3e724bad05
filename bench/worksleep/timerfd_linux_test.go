package worksleep

import (
	"testing"
	"time"
)

// TestDeadlineFirstLeavesNoExpiry: a sleep its read deadline ends before
// the timerfd fires returns nil, and the timerfd's later expiry does not
// end the next sleep on the same file at once.
func TestDeadlineFirstLeavesNoExpiry(t *testing.T) {
	for range 5 {
		if err := sleepArmed(t.Context(), time.Millisecond, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond) // past the timerfd's 20 ms, had it stayed armed
		const d = 5 * time.Millisecond
		start := time.Now()
		if err := Sleep(t.Context(), d); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got < d {
			t.Fatalf("Sleep(%v) after a sleep its deadline ended returned after %v", d, got)
		}
	}
}
