package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// grant is a range record as the test saw it appear in etcd, with the time
// it saw it. The members see it no earlier than the test does, give or take
// the watch's delivery: handlings are matched to grants with grantSlack.
type grant struct {
	at  time.Time
	rec schema.RangeRecord
	key string
	rev int64 // the record's revision
	// prevOwner and prevRev are the record this one replaced (prevRev 0:
	// none), to tell a leaving member's planned handoff (coord/handoff.go)
	// from a failover.
	prevOwner string
	prevRev   int64
}

// planSeen is a handoff plan as written (handoffs/<leaver>).
type planSeen struct {
	leaver string
	rev    int64
	byKey  map[string]schema.PlannedHandoff // nil: the plan was deleted
}

// grantSlack: a handling that starts this little before the test saw its
// member's grant is counted in that grant's tenure (the member saw the
// grant first).
const grantSlack = 100 * time.Millisecond

// watchRanges records every range record and handoff plan written in etcd
// until ctx ends. It starts at revision 1, before any member joins.
func (e *env) watchRanges(ctx context.Context) {
	root := "/keyshare/" + group + "/"
	go func() {
		for wr := range e.cli.Watch(ctx, root+"handoffs/", clientv3.WithPrefix(), clientv3.WithRev(1)) {
			for _, ev := range wr.Events {
				p := planSeen{leaver: strings.TrimPrefix(string(ev.Kv.Key), root+"handoffs/"), rev: ev.Kv.ModRevision}
				var plan schema.HandoffPlan
				if ev.Type == clientv3.EventTypePut && json.Unmarshal(ev.Kv.Value, &plan) == nil {
					p.byKey = make(map[string]schema.PlannedHandoff)
					for _, r := range plan.Ranges {
						p.byKey[r.Key] = r
					}
				}
				e.mu.Lock()
				e.plans = append(e.plans, p)
				e.mu.Unlock()
			}
		}
	}()
	wch := e.cli.Watch(ctx, root+"ranges/", clientv3.WithPrefix(), clientv3.WithRev(1), clientv3.WithPrevKV())
	for wr := range wch {
		now := time.Now()
		for _, ev := range wr.Events {
			if ev.Type != clientv3.EventTypePut {
				continue // a deleted record's space is covered by the puts of the same txn
			}
			var r schema.RangeRecord
			if json.Unmarshal(ev.Kv.Value, &r) != nil || r.Topic != topic {
				continue // damaged on purpose (row 14)
			}
			g := grant{at: now, rec: r, key: string(ev.Kv.Key), rev: ev.Kv.ModRevision}
			var prev schema.RangeRecord
			if ev.PrevKv != nil && json.Unmarshal(ev.PrevKv.Value, &prev) == nil {
				g.prevOwner, g.prevRev = prev.Owner, ev.PrevKv.ModRevision
			}
			e.mu.Lock()
			e.grants = append(e.grants, g)
			e.mu.Unlock()
		}
	}
}

// planned reports whether g is a leaving member's handoff by the plan
// current at g's revision: the plan of g's previous owner names g's range,
// at the revision g replaced, for g's owner. (The leader handing such a
// range on after the leaver's drain budget is counted so too; it writes
// the same record.)
func planned(g grant, plans []planSeen) bool {
	var cur *planSeen
	for i := range plans {
		if p := &plans[i]; p.leaver == g.prevOwner && p.rev < g.rev && (cur == nil || p.rev > cur.rev) {
			cur = p
		}
	}
	if cur == nil || g.prevRev == 0 {
		return false
	}
	h, ok := cur.byKey[g.key]
	return ok && h.Rev == g.prevRev && h.To == g.rec.Owner
}

// overlapResult measures, for every key and every time the range holding it
// changed owner, how long after the old owner's last start of a record of
// the key the new owner's first start came. Negative: the old owner started
// a record after the new owner had started one, two members ran one key at
// once.
type overlapResult struct {
	Moves    int           // owner changes measured (both owners handled the key)
	Overlaps int           // of which negative
	Min      time.Duration // smallest gap (valid if Moves > 0)
	Worst    string        // where the smallest gap is
	// Failovers are the owner changes where the old owner had not
	// released the range nor handed it on by a plan (its session ended,
	// or its drain timed out), FailoverMin their smallest gap.
	Failovers   int
	FailoverMin time.Duration
	// FailoversByPrevious: of Failovers, those whose old owner was running
	// the previous release (upgrade_test.go).
	FailoversByPrevious int
}

func (o overlapResult) String() string {
	if o.Moves == 0 {
		return "overlap: no owner change measured"
	}
	f := "none"
	if o.Failovers > 0 {
		f = fmt.Sprintf("%s over %d", o.FailoverMin.Round(time.Millisecond), o.Failovers)
		if o.FailoversByPrevious > 0 {
			f += fmt.Sprintf(" (%d from an owner on the previous release)", o.FailoversByPrevious)
		}
	}
	return fmt.Sprintf("overlap: min gap %s over %d owner changes (%d negative; worst %s); at failovers %s", o.Min.Round(time.Millisecond), o.Moves, o.Overlaps, o.Worst, f)
}

// overlap computes the overlap result from the grants seen and the
// handlings logged (e.mu held). previous, if not nil, reports whether a
// member was running the previous release at a moment (env.onPrevious).
func overlap(grants []grant, plans []planSeen, lines []handledLine, previous func(member string, at time.Time) bool) overlapResult {
	type pk struct {
		p int32
		h uint32
	}
	// tenure is one owner's uninterrupted ownership of a key's hash.
	type tenure struct {
		owner       string
		state       string // of the owner's last record in the tenure
		handedOver  bool   // begun by the previous owner's planned handoff
		from        time.Time
		first, last time.Time // starts of handlings in it
		n           int
	}
	timelines := map[pk][]*tenure{}
	timeline := func(k pk) []*tenure {
		if tl, ok := timelines[k]; ok {
			return tl
		}
		var tl []*tenure
		for _, g := range grants {
			if g.rec.Partition != k.p || !g.rec.Range().Contains(k.h) {
				continue
			}
			if n := len(tl); n > 0 && tl[n-1].owner == g.rec.Owner {
				tl[n-1].state = g.rec.State
				continue // same owner: split, revoking, released, kept
			}
			tl = append(tl, &tenure{owner: g.rec.Owner, state: g.rec.State, from: g.at, handedOver: planned(g, plans)})
		}
		timelines[k] = tl
		return tl
	}
	keysOf := map[pk]string{}
	for _, l := range lines {
		if l.Start.IsZero() {
			continue
		}
		k := pk{l.Partition, ledger.Hash([]byte(l.Key), l.Offset)}
		keysOf[k] = fmt.Sprintf("partition %d key %s", l.Partition, l.Key)
		tl := timeline(k)
		// The member's latest tenure begun by then: a zombie's late
		// handlings stay in its old tenure.
		for i := len(tl) - 1; i >= 0; i-- {
			t := tl[i]
			if t.owner != l.Member || t.from.After(l.Start.Add(grantSlack)) {
				continue
			}
			if t.n == 0 || l.Start.Before(t.first) {
				t.first = l.Start
			}
			if t.n == 0 || l.Start.After(t.last) {
				t.last = l.Start
			}
			t.n++
			break
		}
	}
	var r overlapResult
	ks := make([]pk, 0, len(timelines))
	for k := range timelines {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].p < ks[j].p || ks[i].p == ks[j].p && ks[i].h < ks[j].h })
	for _, k := range ks {
		tl := timelines[k]
		for i := 1; i < len(tl); i++ {
			prev, next := tl[i-1], tl[i]
			if prev.n == 0 || next.n == 0 {
				continue
			}
			gap := next.first.Sub(prev.last)
			if r.Moves == 0 || gap < r.Min {
				r.Min = gap
				r.Worst = fmt.Sprintf("%s, %s → %s at %s", keysOf[k], prev.owner, next.owner, next.first.Format("15:04:05.000"))
			}
			r.Moves++
			if prev.state != schema.StateReleased && !next.handedOver {
				if r.Failovers == 0 || gap < r.FailoverMin {
					r.FailoverMin = gap
				}
				r.Failovers++
				if previous != nil && previous(prev.owner, prev.last) {
					r.FailoversByPrevious++
				}
			}
			if gap < 0 {
				r.Overlaps++
			}
		}
	}
	return r
}
