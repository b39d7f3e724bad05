package consumer

import (
	"time"

	"github.com/keyshare/keyshare/ledger"
)

// Blocked keys.
//
// A key whose head record does not finish (retried forever without a
// dead-letter topic, or a handler that hangs) keeps its later records
// queued behind it. Left alone they would pile up to MaxInFlight and the
// member would stop fetching every partition: one key would stall all the
// others. So beyond MaxQueuedPerKey a blocked key's records leave memory.
// They stay pending in the ledger (ledger.State.Shelve), so the watermark
// and the committed offset wait for them, and a range that moves hands
// them to its next owner as pending. Once the key moves again, the
// partition is fetched again from the first of them; the ledger answers
// Skip for everything else already handled, so nothing runs twice.
//
// What cannot be helped: one key's records run one at a time, so a blocked
// key's own records wait for it, and the partition's committed offset
// waits for the blocked record.

// keyBlockedAfter is how long a key with queued records may go without a
// worker taking one before it counts as blocked.
const keyBlockedAfter = time.Second

// defaultMaxQueuedPerKey is MaxQueuedPerKey's default, where MaxInFlight
// allows it.
const defaultMaxQueuedPerKey = 100

// shelf is what a partition has shelved since it was last fetched again.
type shelf struct {
	from int64           // the lowest shelved offset: where to fetch again
	keys map[jobKey]bool // the keys whose records were shelved
}

// maxQueuedPerKey is the effective MaxQueuedPerKey.
func (p *pipeline) maxQueuedPerKey() int {
	if n := p.c.cfg.MaxQueuedPerKey; n > 0 {
		return n
	}
	return max(1, min(defaultMaxQueuedPerKey, p.c.cfg.MaxInFlight/4))
}

// evictBlocked takes out of memory the queued records of blocked keys
// beyond MaxQueuedPerKey (records queued before their key blocked). The
// fetch loop calls it at the in-flight bound, before pausing fetching; it
// reports whether any record left.
func (p *pipeline) evictBlocked() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.sched.evictBlocked(p.maxQueuedPerKey())
	for _, j := range out {
		if p.mu.jobs[j.t][j.o] != j {
			continue // abandoned already: whoever removed it counted it out
		}
		delete(p.mu.jobs[j.t], j.o)
		p.untrackLocked(j)
		j.cancel()
		for _, w := range p.mu.byTP[j.t] {
			if w.st.Range().Contains(j.h) {
				p.shelveLocked(j.t, j.key, w.st, j.o, j.h)
				break
			}
		}
	}
	if len(out) > 0 {
		p.log.Debug("blocked keys: queued records left memory; they stay pending", "records", len(out), "per_key_bound", p.maxQueuedPerKey())
	}
	return len(out) > 0
}

func (p *pipeline) shelveLocked(t tp, k jobKey, st *ledger.State, o int64, h uint32) {
	if err := st.Shelve(o, h); err != nil {
		p.log.Error("ledger refused to shelve a record", "topic", t.Topic, "partition", t.Partition, "offset", o, "error", err)
		return
	}
	p.c.metrics.shelved.Add(1)
	sh := p.mu.shelves[t]
	if sh == nil {
		sh = &shelf{from: o, keys: make(map[jobKey]bool)}
		p.mu.shelves[t] = sh
	}
	sh.from = min(sh.from, o)
	sh.keys[k] = true
}

// refetchShelved fetches again, from their first shelved offset, the
// partitions whose blocked keys move again (or whose queues are down to
// half the bound). Only the fetch loop calls it.
func (p *pipeline) refetchShelved() error {
	p.mu.Lock()
	if len(p.mu.shelves) == 0 {
		p.mu.Unlock()
		return nil
	}
	bound := p.maxQueuedPerKey()
	var seeks []partitionOffset
	for t, sh := range p.mu.shelves {
		if !p.mu.assigned[t] {
			delete(p.mu.shelves, t) // not fetched here any more: the ledger has them pending
			continue
		}
		stillBlocked := false
		for k := range sh.keys {
			if n, blocked := p.sched.backlog(k); blocked && n >= bound/2 {
				stillBlocked = true
				break
			}
		}
		if stillBlocked {
			continue
		}
		delete(p.mu.shelves, t)
		if sh.from < p.mu.pos[t] {
			seeks = append(seeks, partitionOffset{t, sh.from})
			p.mu.pos[t] = sh.from
		}
	}
	gen := p.mu.gen
	p.mu.Unlock()
	if len(seeks) == 0 {
		return nil
	}
	p.log.Debug("blocked keys move again: fetching their shelved records", "partitions", len(seeks))
	return p.applyFetch(fetchPlan{seek: seeks}, gen)
}

// backlog returns how many records of key k are queued (not counting one
// a worker runs) and whether the key is blocked: it has queued records and
// no worker has taken one of them for keyBlockedAfter.
func (s *scheduler) backlog(k jobKey) (queued int, blocked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	q := s.keys[k]
	if q == nil {
		return 0, false
	}
	return q.n, q.n > 0 && now.Sub(q.lastTake) >= keyBlockedAfter
}

// evictBlocked removes from the queue of every blocked key its records
// beyond the first keep, and returns them.
func (s *scheduler) evictBlocked(keep int) []*job {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []*job
	for _, q := range s.keys {
		if q.n <= keep || now.Sub(q.lastTake) < keyBlockedAfter {
			continue
		}
		last := q.head // the keep-th record, which stays
		for range keep - 1 {
			last = last.next
		}
		for j := last.next; j != nil; {
			next := j.next
			j.next = nil
			out = append(out, j)
			j = next
		}
		last.next, q.tail, q.n = nil, last, keep
	}
	return out
}
