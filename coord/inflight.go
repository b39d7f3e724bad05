package coord

import "sync"

// recordInFlight is how many transactions of one call are in flight at
// once. A member's flush or release of thousands of ranges is tens of
// transactions (2,048 releases: 33), as are the leader's handoffs and
// commit records for thousands of partitions; written one after the other
// on a loaded etcd they took about 30 ms each, while etcd commits
// concurrent transactions in the same raft round.
const recordInFlight = 4

// eachInFlight calls do for each batch, in order, each in its own
// goroutine, up to recordInFlight at once, and returns when every call has.
// Before a call starts it asks stop (when not nil, and never concurrently
// with itself); once stop reports true, no further call starts. Every
// multi-transaction write or read of coord goes through it: a member's
// flushes and releases (flush.go), its view's ledger reads
// (assignview.go), the leader's assignment rounds (leader.go) and commit
// records (commits.go).
func eachInFlight[T any](batches []T, stop func() bool, do func(i int, batch T)) {
	slots := make(chan struct{}, recordInFlight)
	var wg sync.WaitGroup
	for i, b := range batches {
		slots <- struct{}{}
		if stop != nil && stop() {
			<-slots
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			do(i, b)
		}()
	}
	wg.Wait()
}
