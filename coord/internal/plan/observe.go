package plan

import (
	"time"

	"github.com/keyshare/keyshare/schema"
)

// Observe notes, on the leader's own clock, the first time each draining
// record of snap is seen — revoking, or active with a leaving owner (which
// drains it unasked) — and forgets records that changed or are gone. seen
// is the map the leader keeps across rounds and gives the plan as
// Input.Seen.
func Observe(seen map[RangeObs]time.Time, snap *schema.Snapshot, now time.Time) {
	current := make(map[RangeObs]bool)
	for _, r := range snap.Ranges {
		if m, _ := snap.OwnerOf(r); r.Record.State == schema.StateRevoking || r.Record.State == schema.StateActive && m.ReleasesUnasked() {
			o := RangeObs{Key: r.Key, Rev: r.Rev}
			current[o] = true
			if _, ok := seen[o]; !ok {
				seen[o] = now
			}
		}
	}
	for o := range seen {
		if !current[o] {
			delete(seen, o)
		}
	}
}
