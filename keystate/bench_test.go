package keystate_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// BenchmarkRestore restores the whole space from a compacted changelog of
// n keys held in memory (one entry per key: a 16-byte key, a 64-byte
// value), as a member restoring a range after a move does once its
// consumer has fetched the records. It reports ns/entry, the bytes the
// table counts per key (counted-B/key) and the heap the restored table
// really holds per key (heap-B/key), which EntryOverhead should be close
// to covering.
//
//	go test -run '^$' -bench BenchmarkRestore -benchtime 3x ./keystate/
func BenchmarkRestore(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			entries := make([]keystate.Entry, n)
			value := make([]byte, 64)
			for i := range entries {
				entries[i] = keystate.Entry{Key: fmt.Appendf(nil, "key-%012d", i), Value: value, Applied: int64(i), Fence: 7}
			}
			cfg := keystate.Config{MaxBytes: 1 << 40}
			var t *keystate.Table
			var heap uint64
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				t = nil
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				b.StartTimer()
				rs, err := keystate.NewRestore(ledger.Full, cfg)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range entries {
					if err := rs.Add(e); err != nil {
						b.Fatal(err)
					}
				}
				if t, _, err = rs.Table(7); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				heap = after.HeapAlloc - before.HeapAlloc
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
			b.ReportMetric(float64(t.Bytes())/float64(n), "counted-B/key")
			b.ReportMetric(float64(heap)/float64(n), "heap-B/key")
			runtime.KeepAlive(t)
		})
	}
}
