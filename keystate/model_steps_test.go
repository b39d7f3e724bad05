package keystate_test

import (
	"bytes"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// step takes one random step of the world.
func (w *world) step() {
	c := w.c
	switch c.intn(12, "step") {
	case 0, 1:
		in := input{off: int64(len(w.input)), key: w.keys[c.intn(len(w.keys), "key")], del: c.intn(5, "delete") == 0}
		w.input = append(w.input, in)
		w.logf("produce %d: %s (delete %v)", in.off, in.key, in.del)
	case 2, 3:
		w.run(w.owners[c.intn(len(w.owners), "owner")], false)
	case 4:
		m := w.owners[c.intn(len(w.owners), "owner")]
		w.flush(m)
		w.logf("%s flushes", m.name)
	case 5:
		w.observe(w.owners[c.intn(len(w.owners), "owner")])
	case 6:
		w.move(c.intn(len(w.owners), "owner"), c.intn(3, "how"))
	case 7:
		w.split(c.intn(len(w.owners), "owner"))
	case 8:
		if len(w.owners) > 1 {
			w.merge(c.intn(len(w.owners)-1, "left owner"))
		}
	case 9, 10:
		if len(w.stale) > 0 {
			w.stepStale(w.stale[c.intn(len(w.stale), "stale member")])
		}
	case 11:
		w.compact(c.intn(4, "remove tombstones") == 0)
	}
}

// move hands owner i's range to a new member: gracefully (how 0), after a
// crash (1), or after the owner lost it still running (2).
func (w *world) move(i, how int) {
	old := w.owners[i]
	switch how {
	case 0:
		w.flush(old)
		w.logf("%s hands %s off", old.name, old.table.Range())
		if w.c.intn(2, "keep a copy") == 0 {
			w.copies = append(w.copies, old)
		}
	case 1:
		w.logf("%s crashes", old.name)
	case 2:
		old.unflushed = nil // its ledger writes fail its lost guard
		old.done = maps.Clone(w.done)
		w.stale = append(w.stale, old)
		w.logf("%s loses %s and runs on", old.name, old.table.Range())
	}
	w.owners[i] = w.grant(old.table.Range())
	w.checkSuccession(old, w.owners[i].table)
}

// split cuts owner i's range at a key's hash: the owner keeps the lower
// part under a new token, restored from its own copy of the whole range,
// and the upper goes to a new member, or stays in the same process under
// a token of its own, restored from the same copy.
func (w *world) split(i int) {
	m := w.owners[i]
	r := m.table.Range()
	at := uint64(hashOf(w.keys[w.c.intn(len(w.keys), "split key")]))
	if at <= r.Lo || at >= r.Hi {
		at = r.Lo + r.Len()/2
	}
	if at <= r.Lo {
		return
	}
	w.flush(m)
	before := &member{name: m.name, fence: m.fence, table: m.table, tail: m.tail}
	lower, upper := ledger.HashRange{Lo: r.Lo, Hi: at}, ledger.HashRange{Lo: at, Hi: r.Hi}
	w.copyOf(r) // the member's own table is the copy; older ones go
	w.fence++
	m.fence = w.fence
	m.table = w.restoreFrom(before, lower, m.fence)
	m.tail = w.seq
	w.logf("%s splits %s at %d, keeps %s under fence %d", m.name, r, at, m.table.Range(), m.fence)
	w.checkSuccession(before, m.table)
	var next *member
	if w.c.intn(2, "upper to a new member") == 0 {
		next = w.grant(upper)
	} else {
		w.fence++
		next = &member{name: m.name + "'", fence: w.fence, pos: m.pos}
		next.table = w.restoreFrom(before, upper, next.fence)
		next.tail = w.seq
		w.logf("%s keeps %s too, under fence %d", m.name, upper, next.fence)
	}
	w.checkSuccession(before, next.table)
	w.owners = slices.Insert(w.owners, i+1, next)
}

// merge joins owners i and i+1 gracefully: the left one restores the
// joined range under a new token (its copy holds only part of it).
func (w *world) merge(i int) {
	left, right := w.owners[i], w.owners[i+1]
	w.flush(left)
	w.flush(right)
	w.logf("%s takes %s from %s", left.name, right.table.Range(), right.name)
	before := &member{name: left.name, fence: left.fence, table: left.table}
	joined := ledger.HashRange{Lo: left.table.Range().Lo, Hi: right.table.Range().Hi}
	w.copyOf(joined)
	w.fence++
	left.fence = w.fence
	left.table = w.restore(joined, left.fence)
	left.tail = w.seq
	w.checkSuccession(before, left.table)
	w.checkSuccession(right, left.table)
	left.pos = min(left.pos, right.pos)
	w.owners = slices.Delete(w.owners, i+1, i+2)
}

// stepStale has a stale member run a record, land its oldest append, or
// stop (its appends then land, or time out unsent).
func (w *world) stepStale(m *member) {
	switch w.c.intn(4, "stale step") {
	case 0, 1:
		w.run(m, true)
	case 2:
		if len(m.queue) > 0 {
			w.logf("%s's append lands: %s", m.name, show(m.queue[0]))
			w.append(m.queue[0])
			m.queue = m.queue[1:]
		}
	case 3:
		w.stop(m, w.c.intn(2, "appends land") == 0)
	}
}

func (w *world) stop(m *member, land bool) {
	for _, e := range m.queue {
		if land {
			w.logf("%s's append lands: %s", m.name, show(e))
			w.append(e)
		}
	}
	w.logf("%s stops (its last appends land: %v)", m.name, land)
	w.stale = slices.DeleteFunc(w.stale, func(s *member) bool { return s == m })
}

// compact removes each record of the part every owner has read that a
// later record of its key in that part supersedes, as Kafka's cleaner
// keeps a key's last record; with tombstones, also a key's last tombstone
// there once no stale member runs and the ledger has completed every record
// of the key up to its offset.
func (w *world) compact(tombstones bool) {
	read := w.seq
	for _, m := range w.owners {
		read = min(read, m.tail)
	}
	last := map[string]int{}
	for i, rec := range w.log {
		if rec.seq < read {
			last[string(rec.key)] = i
		}
	}
	kept := w.log[:0:0]
	for i, rec := range w.log {
		if rec.seq < read && last[string(rec.key)] != i {
			continue
		}
		if rec.seq < read && rec.null && tombstones && len(w.stale) == 0 && w.completedUpTo(string(rec.key), rec.headers) {
			w.logf("compaction removes the tombstone of %s", rec.key)
			w.copies = slices.DeleteFunc(w.copies, func(cp *member) bool { return cp.tail <= rec.seq })
			continue
		}
		kept = append(kept, rec)
	}
	w.logf("compaction below seq %d: %d of %d records left", read, len(kept), len(w.log))
	w.log = kept
}

// completedUpTo reports whether the ledger has completed every record of
// key up to the applied offset in headers.
func (w *world) completedUpTo(key string, headers []keystate.Header) bool {
	var applied int64
	for _, h := range headers {
		if h.Key == keystate.HeaderApplied {
			applied, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	for _, in := range w.input[:min(int(applied)+1, len(w.input))] {
		if in.key == key && !w.done[in.off] {
			return false
		}
	}
	return true
}

// checkChains checks that each key's state in t is a single in-order
// application of its records up to its applied offset.
func (w *world) checkChains(what string, t *keystate.Table) {
	w.t.Helper()
	for e, err := range t.All() {
		if err != nil {
			w.fatalf("%s: All: %v", what, err)
		}
		var want []string
		for _, in := range w.input[:e.Applied+1] {
			switch {
			case in.key != string(e.Key):
			case in.del:
				want = want[:0]
			default:
				want = append(want, strconv.FormatInt(in.off, 10))
			}
		}
		last := w.input[e.Applied]
		if last.key != string(e.Key) || last.del != e.Deleted {
			w.fatalf("%s: %s, but record %d is %+v", what, show(e), e.Applied, last)
		}
		var got []string
		for _, part := range strings.Split(strings.TrimSuffix(string(e.Value), ";"), ";") {
			if off, _, _ := strings.Cut(part, "#"); off != "" {
				got = append(got, off)
			}
		}
		if !slices.Equal(got, want) {
			w.fatalf("%s: %s applied records %v; one in-order application gives %v", what, show(e), got, want)
		}
	}
}

// checkSuccession checks the table restored for (part of) prev's range
// against prev's: per key at least prev's offset, and where prev's entry is
// its own (under its token), at the same offset the same state: a stale
// member's change at that offset, made under an older token, never takes
// the place of what the owner wrote.
func (w *world) checkSuccession(prev *member, next *keystate.Table) {
	w.t.Helper()
	for p, err := range prev.table.All() {
		if err != nil {
			w.fatalf("All: %v", err)
		}
		if !next.Range().Contains(hashOf(string(p.Key))) {
			continue
		}
		n, ok := w.entry(next, p.Key)
		switch {
		case !ok && p.Deleted: // its tombstone was compacted away
		case !ok || n.Applied < p.Applied:
			w.fatalf("%s held %s; the next owner restored %s (found %v): behind it", prev.name, show(p), show(n), ok)
		case n.Applied == p.Applied && p.Fence == prev.fence && (n.Deleted != p.Deleted || !bytes.Equal(n.Value, p.Value)):
			w.fatalf("%s wrote %s; the next owner restored %s: another state at the same offset", prev.name, show(p), show(n))
		}
	}
}

// finish stops every stale member, has the owners read their tails and run
// every record, compacts the whole changelog, and checks that a restore of
// the whole space gives exactly the owners' state.
func (w *world) finish() {
	w.logf("finish")
	for len(w.stale) > 0 {
		w.stop(w.stale[0], w.c.intn(2, "appends land") == 0)
	}
	for _, m := range w.owners {
		w.observe(m)
		for w.run(m, false) {
		}
		w.flush(m)
	}
	for _, m := range w.owners {
		w.observe(m)
	}
	w.compact(true)
	got := w.restore(ledger.Full, w.fence+1)
	for _, m := range w.owners {
		w.checkChains("owner "+m.name, m.table)
		for want := range m.table.All() {
			e, ok := w.entry(got, want.Key)
			if !ok && want.Deleted {
				continue
			}
			if !ok || e.Applied != want.Applied || e.Deleted != want.Deleted || !bytes.Equal(e.Value, want.Value) {
				w.fatalf("owner %s holds %s; a restore after compaction gives %s (found %v)", m.name, show(want), show(e), ok)
			}
		}
	}
	for e := range got.All() {
		for _, m := range w.owners {
			if _, ok := w.entry(m.table, e.Key); !ok && m.table.Range().Contains(hashOf(string(e.Key))) && !e.Deleted {
				w.fatalf("a restore after compaction gives %s, which owner %s does not hold", show(e), m.name)
			}
		}
	}
}
