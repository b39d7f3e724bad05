package plan

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// The safety argument of the leader's plan, stated on its changes as data:
// a change only applies while what the leader read is still current, so a
// write by anyone since (an owner's flush or release, another leader) makes
// it fail instead of being overwritten.

// checkGuardsAsRead holds every change of a plan of snap to the rules:
//
//   - a write to a range record read (a rewrite, a merge's delete) guards
//     that record at the revision read; so does a write to a damaged record;
//   - a write to a range's ledger entry guards the entry at the revision read;
//   - a new range record is written where no key was (guarded absent) or
//     inside a range record the change guards as read (a cut of it);
//   - a member key written without a lease is deleted only as read.
func checkGuardsAsRead(t *testing.T, snap *schema.Snapshot, changes []Change) {
	t.Helper()
	records, entries := make(map[string]schema.RangeState), make(map[string]int64)
	for _, r := range snap.Ranges {
		records[r.Key], entries[r.LedgerKey] = r, r.EntryRev
	}
	for _, c := range changes {
		guarded := func(key string, rev int64) bool { return slices.Contains(c.Guards, guardRev(key, rev)) }
		for _, w := range c.Writes {
			r, isRecord := records[w.Key]
			badRev, isBad := snap.BadRanges[w.Key]
			entryRev, isEntry := entries[w.Key]
			memberRev, isBadMember := snap.BadMembers[w.Key]
			switch {
			case isRecord && !guarded(w.Key, r.Rev):
				t.Errorf("%s: writes record %s without guarding it at revision %d as read; guards %+v", c.What, w.Key, r.Rev, c.Guards)
			case isBad && !guarded(w.Key, badRev):
				t.Errorf("%s: writes damaged record %s without guarding it at revision %d as read; guards %+v", c.What, w.Key, badRev, c.Guards)
			case isEntry && !guarded(w.Key, entryRev):
				t.Errorf("%s: writes ledger entry %s without guarding it at revision %d as read; guards %+v", c.What, w.Key, entryRev, c.Guards)
			case isBadMember && (!w.Delete || !guarded(w.Key, memberRev)):
				t.Errorf("%s: writes leaseless member key %s (delete %v) without guarding it at revision %d", c.What, w.Key, w.Delete, memberRev)
			case !isRecord && !isBad && !w.Delete && strings.HasPrefix(w.Key, planSchema.Ranges()):
				topic, part, lo, err := schema.ParseRangeKey(planSchema.Ranges(), w.Key)
				if err != nil {
					t.Fatalf("%s: writes %s: %v", c.What, w.Key, err)
				}
				cut := slices.ContainsFunc(snap.Ranges, func(r schema.RangeState) bool {
					return r.Record.Topic == topic && r.Record.Partition == part && r.Record.Range().Contains(uint32(lo)) && guarded(r.Key, r.Rev)
				})
				if !guarded(w.Key, 0) && !cut {
					t.Errorf("%s: writes new record %s neither guarded absent nor inside a record it guards as read; guards %+v", c.What, w.Key, c.Guards)
				}
			}
		}
	}
}

// guardSnapshot is one partition t/0 in two halves, owned by a and b as
// recs say (owner, state, target), with members a, b and c registered.
func guardSnapshot(recs ...schema.RangeRecord) *schema.Snapshot {
	snap := &schema.Snapshot{Members: make(map[string]schema.Member), BadRanges: map[string]int64{}, BadMembers: map[string]int64{}, Rev: 50}
	for i, id := range []string{"a", "b", "c"} {
		snap.Members[id] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: id, Weight: 1}, CreateRev: int64(i + 1)}
	}
	for i, rec := range recs {
		rec.V, rec.Topic, rec.Gen = 1, "t", 1
		snap.Ranges = append(snap.Ranges, schema.RangeState{
			Key: planSchema.Range("t", 0, rec.Lo), Record: rec, Rev: int64(20 + i),
			LedgerKey: planSchema.LedgerEntry("t", 0, rec.Lo), EntryRev: int64(30 + i),
			Entry: ledger.Entry{Segments: []ledger.Segment{{Lo: rec.Lo, Hi: rec.Hi, Next: 5}}},
		})
	}
	return snap
}

// TestPlanGuards: in each situation the planner meets, its changes guard
// what they read (checkGuardsAsRead), and the change that matters carries
// exactly the guards that make it safe.
func TestPlanGuards(t *testing.T) {
	t.Parallel()
	const half = ledger.HashSpace / 2
	lower := func(owner, st, target string) schema.RangeRecord {
		return schema.RangeRecord{Lo: 0, Hi: half, Owner: owner, State: st, Target: target}
	}
	upper := func(owner, st, target string) schema.RangeRecord {
		return schema.RangeRecord{Lo: half, Hi: ledger.HashSpace, Owner: owner, State: st, Target: target}
	}
	lowKey, highKey := planSchema.Range("t", 0, 0), planSchema.Range("t", 0, half)
	lowEntry, highEntry := planSchema.LedgerEntry("t", 0, 0), planSchema.LedgerEntry("t", 0, half)
	seenAt := time.Now()
	const drain = 10 * time.Second

	tests := []struct {
		name string
		snap func() *schema.Snapshot
		// after is how long after the leader first observed each
		// revoking record it plans.
		after time.Duration
		// key is the change that matters: the one writing this key (""
		// for none expected), with exactly these guards.
		key    string
		guards []Guard
	}{
		{
			name: "a whole range revoked guards its record as read, not its entry (the owner flushes under the record's guard)",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("a", schema.StateActive, ""))
				delete(s.Members, "c")
				return s
			},
			key:    highKey,
			guards: []Guard{guardRev(highKey, 21)},
		},
		{
			name: "a cut range guards its record and the entry it cuts",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(schema.RangeRecord{Lo: 0, Hi: ledger.HashSpace, Owner: "a", State: schema.StateActive})
				delete(s.Members, "c")
				return s
			},
			key:    lowKey,
			guards: []Guard{guardRev(lowKey, 20), guardRev(lowEntry, 30)},
		},
		{
			name: "a revoking range is not handed off while its live owner drains",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("a", schema.StateRevoking, "b"))
				delete(s.Members, "c")
				return s
			},
			after: drain,
		},
		{
			name: "a revoking range is handed off once its drain budget and the grace are over, guarded as read",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("a", schema.StateRevoking, "b"))
				delete(s.Members, "c")
				return s
			},
			after:  drain + time.Second,
			key:    highKey,
			guards: []Guard{guardRev(highKey, 21)},
		},
		{
			name: "a released range is handed off at once, guarded as read",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("a", schema.StateReleased, "b"))
				delete(s.Members, "c")
				return s
			},
			key:    highKey,
			guards: []Guard{guardRev(highKey, 21)},
		},
		{
			name: "a released range with no ledger entry is handed off guarding the entry absent",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("a", schema.StateReleased, "b"))
				delete(s.Members, "c")
				s.Ranges[1].EntryRev, s.Ranges[1].Entry = 0, ledger.Entry{}
				return s
			},
			key:    highKey,
			guards: []Guard{guardRev(highKey, 21), guardRev(highEntry, 0)},
		},
		{
			name: "a crashed owner's range fails over guarded as read",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("c", schema.StateActive, ""))
				delete(s.Members, "c")
				return s
			},
			key:    highKey,
			guards: []Guard{guardRev(highKey, 21)},
		},
		{
			name: "a damaged ledger entry is reset guarding its record and the entry as read",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("b", schema.StateActive, ""))
				delete(s.Members, "c")
				s.Ranges[1].EntryErr = &schema.BadValueError{Key: highEntry, Problem: "damaged"}
				return s
			},
			key:    highKey,
			guards: []Guard{guardRev(highKey, 21), guardRev(highEntry, 31)},
		},
		{
			name: "a fill guards the key absent",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(upper("b", schema.StateActive, ""))
				delete(s.Members, "c")
				return s
			},
			key:    lowKey,
			guards: []Guard{guardRev(lowKey, 0)},
		},
		{
			name: "a fill over a damaged record guards the damaged record's revision",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(upper("b", schema.StateActive, ""))
				delete(s.Members, "c")
				s.BadRanges[lowKey] = 7
				return s
			},
			key:    lowKey,
			guards: []Guard{guardRev(lowKey, 7)},
		},
		{
			name: "a merge guards every record and every entry of its run",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateReleased, "a"), upper("a", schema.StateReleased, "a"))
				delete(s.Members, "b")
				delete(s.Members, "c")
				return s
			},
			key:    lowKey,
			guards: []Guard{guardRev(lowKey, 20), guardRev(lowEntry, 30), guardRev(highKey, 21), guardRev(highEntry, 31)},
		},
		{
			name: "a member key without a lease is deleted only as read",
			snap: func() *schema.Snapshot {
				s := guardSnapshot(lower("a", schema.StateActive, ""), upper("b", schema.StateActive, ""))
				delete(s.Members, "c")
				s.BadMembers[planSchema.Member("x")] = 9
				return s
			},
			key:    planSchema.Member("x"),
			guards: []Guard{guardRev(planSchema.Member("x"), 9)},
		},
	}
	parts := []assign.PartitionWeight{{TopicPartition: assign.TopicPartition{Topic: "t"}}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := tt.snap()
			seen := make(map[RangeObs]time.Time)
			for _, r := range snap.Ranges {
				seen[RangeObs{r.Key, r.Rev}] = seenAt
			}
			changes := Plan(Input{
				Schema: planSchema, Snap: snap, Parts: parts, Now: time.Now(), DrainTimeout: drain, Gen: 2, MaxTxnOps: 128,
				Clock: seenAt.Add(tt.after), Seen: seen, Grace: time.Second, Defrag: true,
			})
			checkGuardsAsRead(t, snap, changes)
			var found []Change
			for _, c := range changes {
				if slices.ContainsFunc(c.Writes, func(w Write) bool { return w.Key == highKey || w.Key == tt.key }) {
					found = append(found, c)
				}
			}
			if tt.key == "" {
				for _, c := range found {
					t.Errorf("planned %q while the owner drains; want the range left alone", c.What)
				}
				return
			}
			i := slices.IndexFunc(found, func(c Change) bool {
				return slices.ContainsFunc(c.Writes, func(w Write) bool { return w.Key == tt.key })
			})
			if i < 0 {
				t.Fatalf("no change writes %s; planned %d changes", tt.key, len(changes))
			}
			if c := found[i]; !slices.Equal(c.Guards, tt.guards) {
				t.Fatalf("%s: guards %+v, want %+v", c.What, c.Guards, tt.guards)
			}
		})
	}
}
