package plan

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// maxPlannedHandoffs bounds a plan's value (about 100 bytes a range, so
// 400 KiB) within etcd's request limit; a leaver's further ranges are
// released and handed on as before.
const maxPlannedHandoffs = 4096

// handoffMatches reports whether the stored plan h is the one the leader would
// write now: it sends every range of want where want does, to members
// registered as they are now, and no other range of pending (the leaver's
// ranges a plan could still send, by key, at their current revision). An
// entry for a range already handed off, or otherwise moved on, does not
// count: the leaver's write of it fails its revision guard anyway, and
// rewriting the plan would fence the leaver's other handoffs under way.
func handoffMatches(h schema.StoredHandoff, want []schema.PlannedHandoff, pending map[string]int64, members map[string]schema.Member) bool {
	wanted := make(map[string]bool, len(want))
	for _, w := range want {
		if h.ByKey[w.Key] != w || h.Plan.Members[w.To] != members[w.To].CreateRev {
			return false
		}
		wanted[w.Key] = true
	}
	for k, p := range h.ByKey {
		if rev, ok := pending[k]; ok && rev == p.Rev && !wanted[k] {
			return false // planned no more: its target went, or the range is cut now
		}
	}
	return true
}

// handoffPlans writes, for each member leaving with a drain budget, where
// each of its active ranges goes once drained: those that move whole to one
// live member that is not leaving, as want says. A plan is written again
// whenever it differs from that (a member came or went, the wanted
// assignment changed, a range it names is now cut between members): the
// leaver's writes compare its revision. A plan left with no range is
// written empty, so the leaver releases every range to the leader.
func (in Input) handoffPlans(have map[assign.TopicPartition][]schema.RangeState, want map[assign.TopicPartition][]assign.Slice) []Change {
	planned := make(map[string][]schema.PlannedHandoff)
	pending := make(map[string]map[string]int64) // leaver → its ranges a plan could send → revision
	for _, p := range in.Parts {
		tp := p.TopicPartition
		for _, r := range have[tp] {
			from, alive := in.Snap.OwnerOf(r)
			if !alive || r.Record.State != schema.StateActive || !from.ReleasesUnasked() || r.EntryErr != nil || in.drainOver(r) {
				continue
			}
			if pending[from.ID] == nil {
				pending[from.ID] = make(map[string]int64)
			}
			pending[from.ID][r.Key] = r.Rev
			pieces := split(r.Record.Range(), want[tp])
			if len(pieces) != 1 || pieces[0].r != r.Record.Range() {
				continue // cut between members: the leader hands it on
			}
			to, ok := in.Snap.Members[pieces[0].owner]
			if !ok || to.Leaving || to.ID == from.ID || len(planned[from.ID]) == maxPlannedHandoffs {
				continue
			}
			planned[from.ID] = append(planned[from.ID], schema.PlannedHandoff{Key: r.Key, Rev: r.Rev, To: to.ID})
		}
	}
	var out []Change
	for _, id := range slices.Sorted(maps.Keys(in.Snap.Members)) {
		from, ranges := in.Snap.Members[id], planned[id]
		if !from.ReleasesUnasked() || from.Lease == 0 || handoffMatches(from.Handoff, ranges, pending[id], in.Snap.Members) {
			continue
		}
		plan := schema.HandoffPlan{V: schema.RecordVersion, Gen: in.Gen, Members: make(map[string]int64), Ranges: append([]schema.PlannedHandoff{}, ranges...)}
		for _, r := range ranges {
			plan.Members[r.To] = in.Snap.Members[r.To].CreateRev
		}
		key := in.Schema.Handoff(id)
		out = append(out, Change{
			What: fmt.Sprintf("plan the handoff of %d ranges of leaving member %s to %s", len(ranges), id, strings.Join(slices.Sorted(maps.Keys(plan.Members)), ", ")),
			Guards: []Guard{
				{Key: in.Schema.Member(id), Rev: from.CreateRev, Created: true},
				guardRev(key, from.Handoff.Rev),
			},
			Writes: []Write{{Key: key, Value: schema.Encode(plan), Lease: from.Lease}},
		})
	}
	return out
}
