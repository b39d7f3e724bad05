package coord_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// flushingOwner plays a member for coord alone: it writes a ledger entry
// (next 100) for every range it gains without one, and releases every range
// revoked from it with its final state (next 200), recording gains and
// releases for checkHandoffOrder.
type flushingOwner struct {
	s *coord.Session
}

func (o *flushingOwner) run(t testing.TB, all *[]event, allMu *sync.Mutex) {
	seen := make(map[string]bool) // range key@rev/state acted on (a leaving member sees its ranges turn revoking at the same rev)
	gained := make(map[string]bool)
	note := func(kind string, r schema.RangeState, gen int64) {
		allMu.Lock()
		*all = append(*all, event{time.Now(), o.s.ID(), kind, r.TP(), r.Record.Range(), gen})
		allMu.Unlock()
	}
	for {
		select {
		case <-o.s.Ctx().Done():
			return
		case a := <-o.s.Updates():
			for _, r := range a.Ranges {
				id := fmt.Sprintf("%s@%d/%s", r.Key, r.Rev, r.Record.State)
				if seen[id] {
					continue
				}
				seen[id] = true
				switch r.Record.State {
				case schema.StateActive:
					if g := r.Key + r.Record.Range().String(); !gained[g] {
						gained[g] = true
						note("gain", r, a.Generation)
					}
					if !r.Entry.Initialized() {
						e := ledger.Entry{Segments: []ledger.Segment{{Lo: r.Record.Lo, Hi: r.Record.Hi, Next: 100}}}
						if err := o.s.Flush(o.s.Ctx(), []coord.RangeFlush{{Range: r, Entry: e}}); err != nil && o.s.Ctx().Err() == nil {
							t.Logf("flush %s: %v (a later assignment supersedes it)", r.Key, err)
						}
					}
				case schema.StateRevoking:
					note("release", r, a.Generation)
					delete(gained, r.Key+r.Record.Range().String())
					final := ledger.Entry{Segments: []ledger.Segment{{Lo: r.Record.Lo, Hi: r.Record.Hi, Next: 200}}}
					if err := o.s.ReleaseRanges(o.s.Ctx(), []coord.RangeRelease{{Range: r, Final: final}}); err != nil && o.s.Ctx().Err() == nil {
						t.Logf("release %s: %v (a later assignment supersedes it)", r.Key, err)
					}
				}
			}
		}
	}
}

// TestMergeOnEtcd: members join one partition one by one, then one crashes
// and one leaves; the real sessions and leader settle the partition with one
// range per owner. Ranges were merged on the way (the poller sees ranges
// revoked to their own owner), no hash was gained while another member held
// it unreleased, and every merged ledger entry is well formed and carries
// the state its parts were released with.
func TestMergeOnEtcd(t *testing.T) {
	t.Parallel()
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	var (
		allMu sync.Mutex
		all   []event
	)
	type live struct {
		s    *coord.Session
		done chan struct{}
	}
	members := map[string]*live{}
	start := func(id string) {
		s, _ := join(t, e.Endpoints, testConfig(t, id, counts))
		o := &flushingOwner{s: s}
		done := make(chan struct{})
		go func() { defer close(done); o.run(t, &all, &allMu) }()
		members[id] = &live{s: s, done: done}
		t.Cleanup(func() { _ = s.Close(); <-done })
	}
	mergeDrains := 0
	stopPolling := pollSnapshots(t, cli, func(snap *schema.Snapshot) {
		for _, r := range snap.Ranges {
			if r.Record.State != schema.StateActive && r.Record.Target == r.Record.Owner {
				mergeDrains++
			}
		}
	})
	// onePerOwner: settled, every range with state, and as many ranges as
	// owners, each owner a live member.
	onePerOwner := func() bool {
		snap := snapshot(t, cli)
		if !settled(snap) {
			return false
		}
		owners := map[string]bool{}
		for _, r := range snap.Ranges {
			if members[r.Record.Owner] == nil || !r.Entry.Initialized() {
				return false
			}
			owners[r.Record.Owner] = true
		}
		return len(snap.Ranges) == len(owners) && len(owners) == len(members)
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		start(id)
		waitFor(t, id+" joins and the ranges merge", 30*time.Second, onePerOwner)
	}
	allMu.Lock()
	all = append(all, event{at: time.Now(), member: "c", kind: "crash"})
	allMu.Unlock()
	_ = members["c"].s.Close()
	<-members["c"].done
	delete(members, "c")
	waitFor(t, "c's share fails over and merges", 30*time.Second, onePerOwner)
	if err := members["b"].s.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := members["b"].s.WaitReleased(t.Context()); err != nil {
		t.Fatal(err)
	}
	_ = members["b"].s.Close()
	<-members["b"].done
	delete(members, "b")
	waitFor(t, "b leaves and the ranges merge", 30*time.Second, onePerOwner)
	stopPolling()

	snap := snapshot(t, cli)
	checkCoverage(t, snap, counts)
	for _, r := range snap.Ranges {
		if err := r.Entry.Validate(r.Record.Range()); err != nil {
			t.Errorf("%s: %v", r.LedgerKey, err)
		}
		for _, s := range r.Entry.Segments {
			if s.Next != 100 && s.Next != 200 {
				t.Errorf("%s: segment %s next %d, want a state its owners wrote (100 or 200)", r.LedgerKey, s.Range(), s.Next)
			}
		}
	}
	if mergeDrains == 0 {
		t.Error("no range was ever revoked to its own owner: nothing was merged")
	}
	allMu.Lock()
	defer allMu.Unlock()
	checkHandoffOrder(t, all)
}
