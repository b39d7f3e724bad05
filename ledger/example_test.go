package ledger_test

import (
	"fmt"

	"github.com/keyshare/keyshare/ledger"
)

// An owner of the whole hash space of a partition, starting at the group's
// committed offset 100, runs records as they are fetched and completes them
// out of order; the watermark stays at the oldest unfinished one.
func ExampleState() {
	st, err := ledger.NewState(ledger.Full, ledger.Entry{}, 100)
	if err != nil {
		panic(err)
	}
	keys := []string{"a", "b", "a"}
	for i, k := range keys {
		o := int64(100 + i)
		v, _ := st.Observe(o, ledger.Hash([]byte(k), o))
		fmt.Println(o, k, v)
	}
	_ = st.Complete(101, ledger.Hash([]byte("b"), 101))
	fmt.Println("watermark", st.Watermark())
	fmt.Printf("%s\n", ledger.Encode(st.Entry()))

	// A new owner inherits the entry: after seeking to the watermark it
	// runs 100 and 102 again, once, and skips 101.
	next, _ := ledger.NewState(ledger.Full, st.Entry(), 0)
	for i, k := range keys {
		o := int64(100 + i)
		v, _ := next.Observe(o, ledger.Hash([]byte(k), o))
		fmt.Println(o, k, v)
	}
	// Output:
	// 100 a run
	// 101 b run
	// 102 a run
	// watermark 100
	// {"v":1,"segments":[{"lo":0,"hi":4294967296,"next":103,"pending":[100,102]}]}
	// 100 a run
	// 101 b skip
	// 102 a run
}

// Splitting a range: the stored entry keeps no hashes, so each half keeps
// every pending offset; the half that does not hold a record's hash drops it
// when the record is fetched again.
func ExampleEntry_Clip() {
	e := ledger.Entry{Segments: []ledger.Segment{{Lo: 0, Hi: ledger.HashSpace, Next: 103, Pending: []int64{100, 102}}}}
	low := e.Clip(ledger.HashRange{Lo: 0, Hi: 1 << 31})
	high := e.Clip(ledger.HashRange{Lo: 1 << 31, Hi: ledger.HashSpace})
	fmt.Println(low.Segments, high.Segments)
	// Output:
	// [{0 2147483648 103 [100 102]}] [{2147483648 4294967296 103 [100 102]}]
}
