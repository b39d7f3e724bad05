package ledger_test

import (
	"math/rand/v2"
	"testing"

	"github.com/keyshare/keyshare/ledger"
)

// keyHashes are the hashes of 1000 keys; record i has key i % 1000.
var keyHashes = func() []uint32 {
	rng := rand.New(rand.NewPCG(1, 2))
	h := make([]uint32, 1000)
	for i := range h {
		h[i] = rng.Uint32()
	}
	return h
}()

// BenchmarkObserveComplete measures the per-record cost of the ledger on an
// owner's hot path: one Observe and one Complete per record, on a state that
// owns the whole hash space. ns/op is per record.
//
//	go test -run '^$' -bench BenchmarkObserveComplete -benchmem ./ledger/
func BenchmarkObserveComplete(b *testing.B) {
	b.Run("in-order", func(b *testing.B) {
		// Each record completes right after it is observed.
		st := benchState(b)
		b.ReportAllocs()
		for i := range b.N {
			o, h := int64(i), keyHashes[i%len(keyHashes)]
			observe(b, st, o, h)
			if err := st.Complete(o, h); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(st.Pending()), "pending")
	})
	b.Run("window64", func(b *testing.B) {
		// 64 records in flight, each completed 64 records after it was
		// observed: the set is never empty and its front moves on
		// every completion.
		const window = 64
		st := benchState(b)
		b.ReportAllocs()
		for i := range b.N {
			o, h := int64(i), keyHashes[i%len(keyHashes)]
			observe(b, st, o, h)
			if j := i - window; j >= 0 {
				if err := st.Complete(int64(j), keyHashes[j%len(keyHashes)]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(st.Pending()), "pending")
	})
	b.Run("stuck1pct", func(b *testing.B) {
		// One record in 100 stays pending for the next 10,000 records,
		// then completes: about 100 offsets pending at any time, the
		// oldest 10,000 below next, tombstones in between.
		const window = 10_000
		st := benchState(b)
		b.ReportAllocs()
		for i := range b.N {
			o, h := int64(i), keyHashes[i%len(keyHashes)]
			observe(b, st, o, h)
			if i%100 != 0 {
				if err := st.Complete(o, h); err != nil {
					b.Fatal(err)
				}
			}
			if j := i - window; j >= 0 && j%100 == 0 {
				if err := st.Complete(int64(j), keyHashes[j%len(keyHashes)]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(st.Pending()), "pending")
	})
	b.Run("hotkeyBlocked", func(b *testing.B) {
		// The records of key 0 (one in 1000) never complete: the
		// watermark stays at the first of them while everything after
		// it completes.
		st := benchState(b)
		b.ReportAllocs()
		for i := range b.N {
			o, h := int64(i), keyHashes[i%len(keyHashes)]
			observe(b, st, o, h)
			if i%len(keyHashes) != 0 {
				if err := st.Complete(o, h); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(st.Pending()), "pending")
	})
}

func benchState(b *testing.B) *ledger.State {
	b.Helper()
	st, err := ledger.NewState(ledger.Full, ledger.Entry{}, 0)
	if err != nil {
		b.Fatal(err)
	}
	return st
}

func observe(b *testing.B, st *ledger.State, o int64, h uint32) {
	if v, err := st.Observe(o, h); v != ledger.Run || err != nil {
		b.Fatalf("Observe(%d) = %v, %v", o, v, err)
	}
}

// BenchmarkEncodeDecode measures a flush's per-entry codec cost for an entry
// with 100 pending offsets.
func BenchmarkEncodeDecode(b *testing.B) {
	pending := make([]int64, 100)
	for i := range pending {
		pending[i] = 1_000_000 + int64(i)*97
	}
	e := entry(seg(0, 1<<31, 1_010_000, pending...), seg(1<<31, top, 1_010_000))
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ledger.Encode(e)
		}
	})
	data := ledger.Encode(e)
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for range b.N {
			if _, err := ledger.Decode("k", data, ledger.Full); err != nil {
				b.Fatal(err)
			}
		}
	})
}
