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
// others. So beyond MaxQueuedPerKey a blocked key's records leave memory:
// they are shelved. They stay pending in the ledger (ledger.State.Shelve),
// so the watermark and the committed offset wait for them, and a range
// that moves hands them to its next owner as pending.
//
// The key's order must survive that. Each partition remembers, for every
// key with shelved records, the first of them (the key's shelf start), and
// every later record of the key fetched meanwhile is shelved too, whatever
// the key does: queued, it would run before the older shelved ones. Once
// the key's queue is down to half the bound it moves again: its shelf is
// released and the partition is fetched again from the shelf start. The
// ledger answers Skip for every record handled already and InFlight for
// those queued or running, so nothing runs twice; records of keys still
// shelved are shelved again. Keys are released one by one: a key blocked
// for good (a poison record and no dead-letter topic) holds its own
// records only.
//
// What cannot be helped: one key's records run one at a time, so a blocked
// key's own records wait for it, and the partition's committed offset
// waits for the blocked record.

// defaultMaxQueuedPerKey is MaxQueuedPerKey's default, where MaxInFlight
// allows it.
const defaultMaxQueuedPerKey = 100

// shelfCheckEvery is how often the fetch loop looks for shelved keys that
// move again. A key's records fetched between two looks are shelved too,
// so a late look costs time, never order; looking at every record would
// cost a scheduler lock per shelved key per record.
const shelfCheckEvery = 100 * time.Millisecond

// blockedCheckEvery is how often, at most, the fetch loop looks for
// blocked keys (evictBlocked). A key counts as blocked a second
// (schedule.BlockedAfter) after its last take, so a look a tenth of that
// later finds it; and a look goes over every key the scheduler holds,
// which at the in-flight bound, where the fetch loop asks after every
// finished record, was 2% of a member's time with no work per record.
const blockedCheckEvery = 100 * time.Millisecond

// shelf is what a partition has shelved: where each key's shelved records
// start.
type shelf map[jobKey]shelved

// shelved is one key's shelf.
type shelved struct {
	from int64  // the key's first shelved offset: where to fetch again
	h    uint32 // the key's hash: which range holds its records
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
	now := p.sched.Now()
	if now.Sub(p.blockedChecked) < blockedCheckEvery {
		return false
	}
	p.blockedChecked = now
	out := p.sched.EvictBlocked(p.maxQueuedPerKey())
	for _, j := range out {
		if !p.mu.isInFlight(j) {
			continue // abandoned already: whoever removed it counted it out
		}
		p.dropJobLocked(j)
		if w := currentRange(p.mu.byTP, j); w != nil {
			p.shelveLocked(j.tp(), j.key, w.st, j.o, j.hash())
		}
	}
	if len(out) > 0 {
		p.log.Debug("blocked keys: queued records left memory; they stay pending", "records", len(out), "per_key_bound", p.maxQueuedPerKey())
	}
	return len(out) > 0
}

// shelvedLocked reports whether key k of partition t has shelved records:
// then its record just fetched is shelved behind them.
func (p *pipeline) shelvedLocked(t tp, k jobKey) bool {
	sh := p.mu.shelves[t]
	if sh == nil {
		return false
	}
	_, ok := sh[k]
	return ok
}

// shelveLocked shelves the record at o of key k, which st answered Run
// for, and makes its key's shelf start at o if that is lower.
func (p *pipeline) shelveLocked(t tp, k jobKey, st *ledger.State, o int64, h uint32) {
	if err := st.Shelve(o, h); err != nil {
		p.log.Error("ledger refused to shelve a record", "topic", t.Topic, "partition", t.Partition, "offset", o, "error", err)
		return
	}
	p.c.metrics.shelved.Add(1)
	sh := p.mu.shelves[t]
	if sh == nil {
		sh = make(shelf)
		p.mu.shelves[t] = sh
	}
	if s, ok := sh[k]; !ok || o < s.from {
		sh[k] = shelved{from: o, h: h}
	}
}

// refetchShelved releases the shelves of keys that move again and fetches
// their partitions again from the first record released. Only the fetch
// loop calls it.
func (p *pipeline) refetchShelved() error {
	p.mu.Lock()
	now := p.sched.Now()
	if len(p.mu.shelves) == 0 || now.Sub(p.shelvesChecked) < shelfCheckEvery {
		p.mu.Unlock()
		return nil
	}
	p.shelvesChecked = now
	seeks := p.releaseShelvesLocked()
	gen := p.mu.gen
	p.mu.Unlock()
	if len(seeks) == 0 {
		return nil
	}
	p.log.Debug("blocked keys move again: fetching their shelved records", "partitions", len(seeks))
	return p.applyFetch(fetchPlan{seek: seeks}, gen)
}

// releaseShelvesLocked releases the shelves of the keys whose queues are
// down to half the bound, and of the keys no range here takes records of
// any more, and returns where their partitions are to be fetched from
// again (the fetch positions are set there).
//
// A key no range here takes is released too, and its partition fetched
// again: a range cut in two keeps a shelved offset pending in both parts
// (its hash is not stored), and the part without the key lets it go only
// when the record is delivered again.
func (p *pipeline) releaseShelvesLocked() []partitionOffset {
	half := p.maxQueuedPerKey() / 2
	var seeks []partitionOffset
	for t, sh := range p.mu.shelves {
		if !p.mu.assigned[t] {
			delete(p.mu.shelves, t) // not fetched here any more: the ledger has them pending
			continue
		}
		from, released := int64(0), false
		for k, s := range sh {
			if p.takesLocked(t, s.h) && p.sched.Queued(k) > half {
				continue // still blocked
			}
			delete(sh, k)
			if !released || s.from < from {
				from, released = s.from, true
			}
		}
		if len(sh) == 0 {
			delete(p.mu.shelves, t)
		}
		if !released {
			continue
		}
		// Not below every watermark: that far back everything is done
		// (an operator's reset may have moved a range past its shelf).
		wm, ok := p.lowestWatermarkLocked(t)
		if !ok {
			continue
		}
		if from = max(from, wm); from < p.mu.pos[t] {
			seeks = append(seeks, partitionOffset{t, from})
			p.mu.pos[t] = from
		}
	}
	return seeks
}

// takesLocked reports whether a range of partition t that takes records
// (not revoking) holds hash h.
func (p *pipeline) takesLocked(t tp, h uint32) bool { return p.workingRangeLocked(t, h) != nil }

// lowestWatermarkLocked is the lowest watermark of partition t's ranges
// that take records, if it has any.
func (p *pipeline) lowestWatermarkLocked(t tp) (int64, bool) {
	var low int64
	found := false
	for _, w := range p.mu.byTP[t] {
		if w.revoking {
			continue
		}
		if wm := w.st.Watermark(); !found || wm < low {
			low, found = wm, true
		}
	}
	return low, found
}
