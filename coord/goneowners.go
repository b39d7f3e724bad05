package coord

import (
	"slices"
	"strings"

	"github.com/keyshare/keyshare/schema"
)

// goneOwner is a member whose registration ended while ranges were still
// recorded for it: the leader fails them over once FailoverGrace has passed.
type goneOwner struct {
	id     string
	ranges int // its ranges not yet released
}

// goneOwners remembers which members the leader has already reported gone,
// so that a member's session ending is said once, not at every round that
// still waits out its ranges' failover grace.
type goneOwners struct {
	told map[string]bool
}

// news returns the members newly seen gone in snap, by id, with how many
// of their ranges will fail over. A member is forgotten once none of its
// ranges is left waiting (failed over, or its registration live again), so
// that a later registration under the same id that ends is reported again.
// A range of an earlier registration under an id that registered again
// counts as gone (state.Snapshot.OwnerOf).
func (g *goneOwners) news(snap *schema.Snapshot) []goneOwner {
	if g.told == nil {
		g.told = map[string]bool{}
	}
	counts := map[string]int{}
	for _, r := range snap.Ranges {
		if _, live := snap.OwnerOf(r); !live && r.Record.State != schema.StateReleased {
			counts[r.Record.Owner]++
		}
	}
	for id := range g.told {
		if counts[id] == 0 {
			delete(g.told, id)
		}
	}
	var out []goneOwner
	for id, n := range counts {
		if !g.told[id] {
			g.told[id] = true
			out = append(out, goneOwner{id: id, ranges: n})
		}
	}
	slices.SortFunc(out, func(a, b goneOwner) int { return strings.Compare(a.id, b.id) })
	return out
}
