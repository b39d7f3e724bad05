package coord_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// BenchmarkChurnEtcd: 200 random events (join, graceful leave, crash) on a
// group of coordination-only members (real sessions on an embedded etcd,
// each flushing a ledger entry for what it gains and releasing what is
// revoked at once), 4 partitions, an event every 50–250 ms without waiting
// for the group to settle; then the time until it settles (every range
// active with a live owner and no more than one range per partition beyond
// its owners, or 3 minutes), and the fragmentation then. Run with
//
//	go test -run '^$' -bench 'ChurnEtcd' -benchtime 1x ./coord/
//
// The seed is 18 unless KEYSHARE_CHURN_SEED says otherwise.
func BenchmarkChurnEtcd(b *testing.B) {
	for range b.N {
		churnEtcd(b)
	}
}

func churnEtcd(b *testing.B) {
	const p, events = 4, 200
	seed := uint64(18)
	if s := testSeed(); s != 0 {
		seed = s
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	cli, e := testutil.StartEtcd(b)
	counts := map[string]int32{"t": p}
	var (
		allMu sync.Mutex
		all   []event
		wg    sync.WaitGroup
	)
	members := map[string]*coord.Session{}
	next := 0
	start := func() {
		id := fmt.Sprintf("m%03d", next)
		next++
		cfg := coord.DefaultConfig()
		cfg.Group, cfg.MemberID, cfg.Topics = "g", id, []string{"t"}
		cfg.Partitions = static(counts)
		cfg.SessionTTL = 5 * time.Second
		cfg.DrainTimeout = 10 * time.Second
		cfg.RebalanceDebounce = 50 * time.Millisecond
		cfg.Logger = testutil.Logger(b).Named(id)
		k := testutil.NewEtcdClient(b, e.Endpoints)
		s, err := coord.Join(b.Context(), k, cfg)
		if err != nil {
			b.Fatalf("join %s: %v", id, err)
		}
		b.Cleanup(func() { _ = s.Close() })
		members[id] = s
		o := &flushingOwner{s: s}
		wg.Add(1)
		go func() { defer wg.Done(); o.run(b, &all, &allMu) }()
	}
	defer wg.Wait()
	start()
	joins, leaves, crashes := 1, 0, 0
	for range events - 1 {
		ids := make([]string, 0, len(members))
		for id := range members {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		joinP := 30
		if len(ids) < 16 {
			joinP = 70
		}
		switch ev := rng.IntN(100); {
		case len(ids) < 2 || ev < joinP:
			start()
			joins++
		case ev%2 == 0:
			id := ids[rng.IntN(len(ids))]
			s := members[id]
			delete(members, id)
			leaves++
			if err := s.Leave(b.Context()); err != nil {
				b.Fatalf("leave %s: %v", id, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Bounded: a leaver the leader never releases (a
				// regression in merging or handoffs) must not hang
				// the run.
				ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
				defer cancel()
				_ = s.WaitReleased(ctx)
				_ = s.Close()
			}()
		default:
			id := ids[rng.IntN(len(ids))]
			s := members[id]
			delete(members, id)
			crashes++
			_ = s.Close()
		}
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond)
	}
	last := time.Now()
	var snap *schema.Snapshot
	settledIn := time.Duration(-1)
	for time.Since(last) < 3*time.Minute {
		var err error
		snap, err = coord.ReadSnapshot(b.Context(), cli, schema.Group{Name: "g"})
		if err != nil {
			b.Fatal(err)
		}
		if settled(snap) && fragmentsWithin(snap, members) {
			settledIn = time.Since(last)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	maxRanges, ranges, reads := 0, 0, 0
	for _, list := range snap.Partitions() {
		owners := map[string]bool{}
		for _, r := range list {
			owners[r.Record.Owner] = true
		}
		maxRanges = max(maxRanges, len(list))
		ranges += len(list)
		reads += len(owners)
	}
	m := len(members)
	b.Logf("seed %d: %d joins, %d leaves, %d crashes; %d members at the end; settled in %s", seed, joins, leaves, crashes, m, settledIn)
	b.ReportMetric(settledIn.Seconds(), "s-to-settle")
	b.ReportMetric(float64(m), "members")
	b.ReportMetric(float64(maxRanges), "max-ranges/partition")
	b.ReportMetric(float64(ranges), "ranges")
	b.ReportMetric(float64(reads)/p, "reads/P")
	b.ReportMetric(float64(p+m-1)/p, "bound(P+M-1)/P")
	for _, s := range members {
		_ = s.Close()
	}
}

// fragmentsWithin reports whether every partition has at most one range
// more than owners, all of them live members.
func fragmentsWithin(snap *schema.Snapshot, members map[string]*coord.Session) bool {
	for _, list := range snap.Partitions() {
		owners := map[string]bool{}
		for _, r := range list {
			if members[r.Record.Owner] == nil {
				return false
			}
			owners[r.Record.Owner] = true
		}
		if len(list) > len(owners)+1 {
			return false
		}
	}
	return true
}
