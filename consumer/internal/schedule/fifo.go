package schedule

// fifo is a first-in, first-out queue that reuses its array. Taking from
// the front of a slice (s = s[1:]) and appending at its back leaves the
// array's front behind: a queue that stays short, as the ready keys do
// while workers keep up, then gets a new array from append for nearly
// every item (8 bytes and a collector's scan per record).
type fifo[T any] struct {
	items []T
	head  int // items[head:] are queued
}

func (f *fifo[T]) len() int { return len(f.items) - f.head }

// push queues v at the back.
func (f *fifo[T]) push(v T) {
	if len(f.items) == cap(f.items) && f.head > 0 && f.head >= len(f.items)/2 {
		// The array is full to its end, and at least half of it is
		// taken items: move the queued ones to its front rather than
		// grow it. Moving only then keeps a push O(1) amortized.
		n := copy(f.items, f.items[f.head:])
		clear(f.items[n:])
		f.items, f.head = f.items[:n], 0
	}
	f.items = append(f.items, v)
}

// pop takes the front item; there must be one.
func (f *fifo[T]) pop() T {
	var zero T
	v := f.items[f.head]
	f.items[f.head] = zero // no reference kept for the collector
	f.head++
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	}
	return v
}
