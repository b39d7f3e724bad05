package statestore

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// BenchmarkRestoreOnDisk restores the whole hash space of a changelog
// partition of n keys into the disk store (Config.Dir), as a member does
// when it takes a range: from the changelog's start (no copy holds the
// range), and from the member's copy of the range plus a tail of n/100
// changes appended after it (a range it takes back). Only -bench runs it:
//
//	go test -run '^$' -bench BenchmarkRestoreOnDisk -benchtime 1x -count 2 ./statestore/
//
// It reports the seconds of one restore, the changelog entries it read,
// and the disk store's size after it.
func BenchmarkRestoreOnDisk(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			topic := DefaultChangelog("g", "events")
			k := testutil.StartKafka(b, map[string]int32{topic: 1})
			fillChangelog(b, k.Brokers, topic, n, 0)
			applied := int64(n) // the next tail's first applied offset
			for _, from := range []string{"changelog", "copy"} {
				b.Run("from="+from, func(b *testing.B) {
					var read, disk int64
					var restore time.Duration
					for range b.N {
						s := benchDiskStore(b, k.Brokers, topic)
						var start int64 // where the timed restore reads from
						if from == "copy" {
							first := benchGrant(1)
							if err := s.restoreTable(b.Context(), first, nil); err != nil {
								b.Fatal(err)
							}
							start = first.through
							s.copies = []*copyRange{{pk: partitionKey{"events", 0}, rng: ledger.Full, through: start, at: time.Now()}}
							fillChangelog(b, k.Brokers, topic, n/100, applied)
							applied += int64(n / 100)
						}
						g := benchGrant(2)
						g.parts = s.takeCopiesLocked(g)
						began := time.Now()
						if err := s.restoreTable(b.Context(), g, nil); err != nil {
							b.Fatal(err)
						}
						restore += time.Since(began)
						if g.table.Len() != n {
							b.Fatalf("restored %d keys of the %d in the changelog", g.table.Len(), n)
						}
						if (from == "copy") != (s.fromCopy.Load() == 1) {
							b.Fatalf("restore from %s: %d from a copy", from, s.fromCopy.Load())
						}
						read = g.progress.end.Load() - start
						if err := s.disk.db.Flush(); err != nil { // the memtables into tables, to size them
							b.Fatal(err)
						}
						disk = int64(s.disk.db.Metrics().DiskSpaceUsage())
						if err := s.disk.close(); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(restore.Seconds()/float64(b.N), "s/restore")
					b.ReportMetric(float64(read), "entries-read")
					b.ReportMetric(float64(disk), "disk-B")
				})
			}
		})
	}
}

// benchDiskStore is a Store with a disk store in a new directory and no
// producer: a restore of a changelog without stale changes appends no
// repair.
func benchDiskStore(b testing.TB, brokers, changelog string) *Store {
	b.Helper()
	s := &Store{
		cfg:       Config{Group: "g", Kafka: readerKafka(b, brokers), Dir: b.TempDir()}.withDefaults(),
		log:       hclog.NewNullLogger(),
		changelog: map[string]string{"events": changelog},
		held:      make(grants),
	}
	d, err := openDisk(s.cfg.Dir, "g", s.cfg.DiskCacheBytes, s.log)
	if err != nil {
		b.Fatal(err)
	}
	s.disk = d
	return s
}

func benchGrant(token int64) *grant {
	g := &grant{topic: "events", partition: 0, rng: ledger.Full, token: token, ready: make(chan struct{})}
	g.progress.started = time.Now()
	g.progress.end.Store(-1)
	return g
}
