package schedule

import (
	"testing"

	"pgregory.net/rapid"
)

// TestFIFOOrder: whatever the interleaving of pushes and pops, items come
// out in the order they went in, and len counts those queued.
func TestFIFOOrder(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var f fifo[int]
		var model []int
		next := 0
		for range rapid.IntRange(0, 300).Draw(t, "steps") {
			if len(model) > 0 && rapid.Bool().Draw(t, "pop") {
				if got := f.pop(); got != model[0] {
					t.Fatalf("popped %d, want %d", got, model[0])
				}
				model = model[1:]
			} else {
				f.push(next)
				model = append(model, next)
				next++
			}
			if f.len() != len(model) {
				t.Fatalf("len %d, want %d", f.len(), len(model))
			}
		}
	})
}

// TestFIFOReusesItsArray: a queue that stays short allocates nothing once
// its array has grown, where a slice taken from the front (s = s[1:])
// needs a new array nearly every push.
func TestFIFOReusesItsArray(t *testing.T) {
	for _, queued := range []int{0, 1, 5} {
		var f fifo[*int]
		v := new(int)
		for range queued {
			f.push(v)
		}
		allocs := testing.AllocsPerRun(10, func() {
			for range 100 {
				f.push(v)
				f.pop()
			}
		})
		if allocs != 0 {
			t.Fatalf("%d queued: %.0f allocations per 100 pushes and pops, want 0", queued, allocs)
		}
	}
}
