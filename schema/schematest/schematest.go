// Package schematest builds group snapshots for the tests of the packages
// that decide on them (the planner, the leader's rounds), so that each
// does not keep its own copy.
package schematest

import (
	"fmt"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Even is one partition t/0 cut into n equal active ranges owned by
// m00..m(n-1), all registered, each with ledger state, keyed under s.
func Even(s schema.Keys, n int) *schema.Snapshot {
	snap := &schema.Snapshot{Members: make(map[string]schema.Member), BadRanges: map[string]int64{}}
	rev := int64(10)
	for i := range n {
		id := fmt.Sprintf("m%02d", i)
		snap.Members[id] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: id, Weight: 1}, CreateRev: 1}
		r := ledger.HashRange{Lo: ledger.HashSpace * uint64(i) / uint64(n), Hi: ledger.HashSpace * uint64(i+1) / uint64(n)}
		rev++
		snap.Ranges = append(snap.Ranges, schema.RangeState{
			Key:       s.Range("t", 0, r.Lo),
			Record:    schema.RangeRecord{V: 1, Topic: "t", Lo: r.Lo, Hi: r.Hi, Owner: id, State: schema.StateActive, Gen: 1},
			Rev:       rev,
			LedgerKey: s.LedgerEntry("t", 0, r.Lo),
			Entry:     ledger.Entry{Segments: []ledger.Segment{{Lo: r.Lo, Hi: r.Hi, Next: 100}}},
			EntryRev:  rev,
		})
	}
	snap.Rev = rev
	return snap
}
