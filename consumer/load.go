package consumer

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Load accounting: what the records of each owned range cost, measured on
// the data path and written to etcd every Config.LoadReportInterval
// (state.LoadReport) for the leader to place split points by load rather
// than by hash width.
//
// Busy time is how long a record held a worker: from the moment a worker
// takes it until its outcome, retries and their backoffs included (a
// worker waiting out a backoff serves no other key). In batch mode it is
// the time of the handler calls that held the record, a batch's time split
// evenly over its records. A record's busy time is
// counted in the range that holds it when it finishes; records that finish
// after their range was dropped are not counted anywhere.

// hotCapacity is how many keys a range's space-saving summary tracks: a
// few times assign.MaxHotKeys, so that the reported keys' lower bounds are
// tight when a few keys carry the load, while each record still costs a
// scan of one small array.
const hotCapacity = 4 * assign.MaxHotKeys

// hotEntry is a key tracked by a space-saving summary: weight
// overestimates its busy time by at most err (the weight of the key it
// displaced). key holds the first bytes of the key of the record that last
// added weight to it (keyLen is that key's length): a fixed array, so
// that tracking a key's name allocates nothing per record and a range's
// summary stays hotCapacity × about 100 bytes however long keys are.
type hotEntry struct {
	hash        uint32
	keyLen      uint32
	weight, err time.Duration
	key         [schema.HotKeyBytes]byte
}

// setKey keeps the first bytes of key.
func (e *hotEntry) setKey(key []byte) {
	e.keyLen = uint32(len(key))
	copy(e.key[:], key)
}

// text is the entry's key for display: escaped and cut (textsafe.Head),
// with its true length when longer than what was kept.
func (e *hotEntry) text() string {
	return textsafe.Head(e.key[:min(int(e.keyLen), len(e.key))], int(e.keyLen), schema.HotKeyBytes)
}

// topKeys is a weighted space-saving summary (Metwally et al. 2005) of
// busy time by key hash: any key whose busy time exceeds total/hotCapacity
// is in it, and weight-err is a lower bound of a tracked key's busy time.
type topKeys struct {
	n int
	e [hotCapacity]hotEntry
}

// add counts w of busy time for hash h, whose record's key is key.
func (k *topKeys) add(h uint32, w time.Duration, key []byte) {
	for i := range k.n {
		if e := &k.e[i]; e.hash == h {
			e.weight += w
			e.setKey(key)
			return
		}
	}
	if k.n < hotCapacity {
		e := &k.e[k.n]
		e.hash, e.weight, e.err = h, w, 0
		e.setKey(key)
		k.n++
		return
	}
	least := 0
	for i := 1; i < hotCapacity; i++ {
		if k.e[i].weight < k.e[least].weight {
			least = i
		}
	}
	e := &k.e[least]
	floor := e.weight
	e.hash, e.weight, e.err = h, floor+w, floor
	e.setKey(key)
}

// top returns up to n keys by their guaranteed busy time (weight-err, in
// weight; err 0), largest first, leaving out keys with none guaranteed.
// Reporting the lower bound, not the weight, keeps uniform keys from
// looking hot: in a full summary every weight is at least
// total/hotCapacity, but a key that only rotated through the summary has
// a lower bound near zero.
func (k *topKeys) top(n int) []hotEntry {
	out := make([]hotEntry, 0, k.n)
	for _, e := range k.e[:k.n] {
		if e.weight > e.err {
			e.weight, e.err = e.weight-e.err, 0
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b hotEntry) int {
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.hash, b.hash)
	})
	return out[:min(n, len(out))]
}

// rangeLoad is one owned range's load since its window began.
type rangeLoad struct {
	r       ledger.HashRange
	since   time.Time // the window's start
	records int64     // records done
	busy    time.Duration
	buckets [assign.LoadBuckets]time.Duration
	hot     topKeys
}

func newRangeLoad(r ledger.HashRange, since time.Time) *rangeLoad {
	return &rangeLoad{r: r, since: since}
}

// reset starts a new window at since, in place: a range's summary is a
// few kilobytes, not worth a new allocation per range every report.
func (l *rangeLoad) reset(since time.Time) { *l = rangeLoad{r: l.r, since: since} }

// bucket is the part of the range h falls in: assign.LoadBuckets parts of
// equal width, the last taking the remainder (all of a range narrower than
// LoadBuckets hashes).
func (l *rangeLoad) bucket(h uint32) int {
	width := l.r.Len() / assign.LoadBuckets
	if width == 0 {
		return assign.LoadBuckets - 1
	}
	return int(min((uint64(h)-l.r.Lo)/width, assign.LoadBuckets-1))
}

// add counts a record of hash h and key key that held a worker for busy;
// done says it was handled (or dead-lettered), not abandoned.
func (l *rangeLoad) add(h uint32, key []byte, busy time.Duration, done bool) {
	if done {
		l.records++
	}
	if busy <= 0 {
		return
	}
	l.busy += busy
	l.buckets[l.bucket(h)] += busy
	l.hot.add(h, busy, key)
}

// rates is the range's load over its window ending at now, with backlog
// records fetched and not handled, and the hot keys it lists (rl.Hot's
// entries, in its order).
func (l *rangeLoad) rates(t tp, now time.Time, backlog int64) (rl assign.RangeLoad, hot []hotEntry) {
	rl = assign.RangeLoad{Topic: t.Topic, Partition: t.Partition, Lo: l.r.Lo, Hi: l.r.Hi, Backlog: backlog}
	secs := now.Sub(l.since).Seconds()
	if secs <= 0 {
		return rl, nil
	}
	rl.RecordsPerSec = float64(l.records) / secs
	rl.BusyPerSec = l.busy.Seconds() / secs
	if l.busy > 0 {
		rl.Buckets = make([]float64, assign.LoadBuckets)
		for i, b := range l.buckets {
			rl.Buckets[i] = b.Seconds() / secs
		}
	}
	hot = l.hot.top(assign.MaxHotKeys)
	for _, e := range hot {
		rl.Hot = append(rl.Hot, assign.HotKey{Hash: uint64(e.hash), BusyPerSec: e.weight.Seconds() / secs})
	}
	return rl, hot
}

// loadTable is the load of every owned range, keyed by the range's entry in
// the range table: reconcile keeps a range's *owned while the range is
// unchanged, and a range cut or merged is a new one, measured afresh. It
// lives in pipeline.mu.
type loadTable struct {
	byRange map[*owned]*rangeLoad
	last    time.Time // the last report (or the pipeline's start)
}

func newLoadTable(now time.Time) loadTable {
	return loadTable{byRange: make(map[*owned]*rangeLoad), last: now}
}

// add counts a finished record of hash h and key key of range w. A range first seen
// here was acquired since the last report: its window starts no earlier
// than its first record was dispatched (since), not at the last report,
// which would understate its rates.
func (lt *loadTable) add(w *owned, h uint32, key []byte, busy time.Duration, done bool, since time.Time) {
	l := lt.byRange[w]
	if l == nil {
		if lt.byRange == nil {
			lt.byRange = make(map[*owned]*rangeLoad)
		}
		start := lt.last
		if since.After(start) {
			start = since
		}
		l = newRangeLoad(w.st.Range(), start)
		lt.byRange[w] = l
	}
	l.add(h, key, busy, done)
}

// report builds the load report of ranges at now, backlog giving each one's
// records fetched and not handled, and the names of its hot keys, and
// starts a new window. Each range's hot keys that are notable
// (state.NotableHotKey), with their names, are kept in its hot for Status. A range measured for less than half of the last
// window keeps its window open, so that its next rates are over a useful
// span rather than a few records. Ranges no longer given are forgotten.
func (lt *loadTable) report(now time.Time, ranges []*owned, backlog func(*owned) int64) (schema.LoadReport, schema.HotKeyNames) {
	window := now.Sub(lt.last)
	r := schema.LoadReport{At: now, Window: max(window, time.Millisecond).Seconds(), Ranges: make([]assign.RangeLoad, 0, len(ranges))}
	type named struct {
		schema.HotKeyName
		busy float64
	}
	var names []named
	next := make(map[*owned]*rangeLoad, len(ranges))
	for _, w := range ranges {
		l := lt.byRange[w]
		if l == nil {
			l = newRangeLoad(w.st.Range(), lt.last)
		}
		rl, top := l.rates(w.tp(), now, backlog(w))
		r.Ranges = append(r.Ranges, rl)
		w.hot = nil
		for i, e := range top {
			if !schema.NotableHotKey(rl.Hot[i].BusyPerSec, rl.BusyPerSec) {
				continue
			}
			hk := HotKey{Key: e.text(), BusyPerSec: rl.Hot[i].BusyPerSec, Share: min(rl.Hot[i].BusyPerSec/rl.BusyPerSec, 1)}
			w.hot = append(w.hot, hk)
			names = append(names, named{schema.HotKeyName{Topic: rl.Topic, Partition: rl.Partition, Hash: uint64(e.hash), Key: hk.Key}, hk.BusyPerSec})
		}
		if now.Sub(l.since) >= window/2 {
			l.reset(now)
		}
		next[w] = l
	}
	slices.SortFunc(r.Ranges, func(a, b assign.RangeLoad) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Lo, b.Lo))
	})
	lt.byRange, lt.last = next, now
	// The busiest names when there are more than a value holds, in key
	// order, so that the same keys make the same value (reportLoad
	// writes it only when it changes).
	if len(names) > schema.MaxHotKeyNames {
		slices.SortFunc(names, func(a, b named) int { return cmp.Compare(b.busy, a.busy) })
		names = names[:schema.MaxHotKeyNames]
	}
	hk := schema.HotKeyNames{Keys: make([]schema.HotKeyName, 0, len(names))}
	for _, n := range names {
		hk.Keys = append(hk.Keys, n.HotKeyName)
	}
	slices.SortFunc(hk.Keys, func(a, b schema.HotKeyName) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Hash, b.Hash))
	})
	return r, hk
}

// loadReport is the load of the ranges the member works on (not those it is
// handing over), and the names of their hot keys, ending a window.
func (p *pipeline) loadReport(now time.Time) (schema.LoadReport, schema.HotKeyNames) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ranges []*owned
	for _, w := range p.mu.ranges {
		if w.revoking {
			w.hot = nil // not measured any more: no key of it shown
			continue
		}
		ranges = append(ranges, w)
	}
	backlog := func(w *owned) int64 {
		var n int64
		for j := range p.mu.jobsOf(w.tp()) {
			if w.st.Range().Contains(j.hash()) {
				n++
			}
		}
		return n
	}
	return p.mu.load.report(now, ranges, backlog)
}

// reportLoad writes the member's load report every LoadReportInterval
// until the pipeline stops, with its hot key names when they differ from
// those last written (in the same transaction: they change far less often
// than the rates). A report that fails is skipped, not retried: the next
// one replaces it. The first failure of a run is a warning, the rest are
// debug logs until one succeeds.
func (p *pipeline) reportLoad() {
	interval := p.c.cfg.LoadReportInterval
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failing := false
	var written []schema.HotKeyName // none yet: the key does not exist
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-tick.C:
		}
		r, names := p.loadReport(time.Now())
		var changed *schema.HotKeyNames
		if !slices.Equal(names.Keys, written) {
			changed = &names
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.c.cfg.EtcdTimeout)
		err := p.sess.ReportLoad(ctx, r, changed)
		cancel()
		switch {
		case err == nil:
			if changed != nil {
				written = names.Keys
			}
			p.c.metrics.loadReports.Add(1)
			if failing {
				p.log.Info("load reports written again")
			}
			failing = false
		case p.ctx.Err() != nil:
			return
		default:
			p.c.metrics.loadReportErrors.Add(1)
			level := p.log.Warn
			if failing {
				level = p.log.Debug
			}
			level("load report not written; the next one replaces it", "interval", interval, "error", err)
			failing = true
		}
	}
}
