package coord_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestRandomMembershipChurn joins and removes members in a random order (a
// seeded sequence; the seed is logged so a failure can be replayed with
// KEYSHARE_CHURN_SEED). Members leave either gracefully (Leave, then their
// ranges are revoked and released) or by crashing (their session closes).
// While it runs, a poller checks every snapshot it sees: no two ranges of a
// partition overlap, so no hash ever has two owners. After each step settles,
// every partition is covered exactly by ranges of live members.
func TestRandomMembershipChurn(t *testing.T) {
	seed := rand.Uint64()
	if s := testSeed(); s != 0 {
		seed = s
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"a": 2, "b": 1}
	var (
		allMu sync.Mutex
		all   []event
	)
	type live struct {
		s    *coord.Session
		done chan struct{}
	}
	members := map[string]*live{}
	next := 0
	start := func() {
		id := fmt.Sprintf("m%d", next)
		next++
		cfg := testConfig(t, id, counts)
		s, _ := join(t, e.Endpoints, cfg)
		o := &owner{s: s, delay: time.Duration(rng.IntN(100)) * time.Millisecond}
		done := make(chan struct{})
		go func() { defer close(done); o.run(t, &all, &allMu) }()
		members[id] = &live{s: s, done: done}
	}

	// The poller: no overlap in any snapshot, ever.
	var overlaps []string
	stopPolling := pollSnapshots(t, cli, func(snap *schema.Snapshot) {
		end := map[assign.TopicPartition]uint64{}
		for _, r := range snap.Ranges {
			if r.Record.Lo < end[r.TP()] {
				overlaps = append(overlaps, fmt.Sprintf("rev %d: %s/%d %s overlaps the range before it", snap.Rev, r.Record.Topic, r.Record.Partition, r.Record.Range()))
			}
			end[r.TP()] = r.Record.Hi
		}
	})

	start()
	const steps = 12
	for step := range steps {
		switch {
		case len(members) <= 1 || (len(members) < 6 && rng.IntN(2) == 0):
			start()
			t.Logf("step %d: join (now %d members)", step, len(members))
		default:
			ids := make([]string, 0, len(members))
			for id := range members {
				ids = append(ids, id)
			}
			id := ids[rng.IntN(len(ids))]
			m := members[id]
			delete(members, id)
			if rng.IntN(2) == 0 {
				if err := m.s.Leave(t.Context()); err != nil {
					t.Fatal(err)
				}
				if err := m.s.WaitReleased(t.Context()); err != nil {
					t.Fatal(err)
				}
				t.Logf("step %d: %s leaves gracefully", step, id)
			} else {
				t.Logf("step %d: %s crashes", step, id)
				allMu.Lock()
				all = append(all, event{at: time.Now(), member: id, kind: "crash"})
				allMu.Unlock()
			}
			_ = m.s.Close()
			<-m.done
		}
		waitFor(t, fmt.Sprintf("step %d to settle", step), 30*time.Second, func() bool {
			snap := snapshot(t, cli)
			if !settled(snap) {
				return false
			}
			for _, r := range snap.Ranges {
				if _, ok := members[r.Record.Owner]; !ok {
					return false
				}
			}
			// Every live member has a share (there are enough partitions'
			// hashes for everyone).
			for id := range members {
				if len(snap.Owned(id)) == 0 {
					return false
				}
			}
			return true
		})
		checkCoverage(t, snapshot(t, cli), counts)
	}
	stopPolling()
	for _, o := range overlaps {
		t.Error(o)
	}
	// Closing the members one by one is a crash of each as far as the
	// others are concerned: the leader fails its ranges over to members
	// still running, which record the gains.
	for id, m := range members {
		allMu.Lock()
		all = append(all, event{at: time.Now(), member: id, kind: "crash"})
		allMu.Unlock()
		_ = m.s.Close()
		<-m.done
	}
	allMu.Lock()
	defer allMu.Unlock()
	checkHandoffOrder(t, all)
}

// checkHandoffOrder fails if a member gained a hash that another owner held
// and had neither released nor lost by crashing.
func checkHandoffOrder(t *testing.T, all []event) {
	t.Helper()
	type span struct {
		r     ledger.HashRange
		tp    assign.TopicPartition
		owner string
		freed bool
	}
	// A crashed member's lease is revoked right after its crash event, so
	// its hashes may go to others from then on.
	crashed := make(map[string]time.Time)
	for _, ev := range all {
		if ev.kind == "crash" {
			crashed[ev.member] = ev.at
		}
	}
	var held []span
	gains := 0
	for _, ev := range all {
		switch ev.kind {
		case "release":
			for i := range held {
				if held[i].owner == ev.member && held[i].tp == ev.tp && !held[i].r.Intersect(ev.r).Empty() {
					held[i].freed = true
				}
			}
		case "gain":
			gains++
			for _, h := range held {
				if c, ok := crashed[h.owner]; ok && !ev.at.Before(c) {
					continue
				}
				if h.owner != ev.member && !h.freed && h.tp == ev.tp && !h.r.Intersect(ev.r).Empty() {
					t.Errorf("%s gained %s/%d %s at %s while %s held %s unreleased", ev.member, ev.tp.Topic, ev.tp.Partition, ev.r, ev.at.Format(time.StampMilli), h.owner, h.r)
				}
			}
			held = append(held, span{r: ev.r, tp: ev.tp, owner: ev.member})
		}
	}
	if gains == 0 {
		t.Fatal("no range was ever gained")
	}
}

var testKeys = schema.Group{Prefix: "/keyshare", Name: "g"}.Keys()

// testSeed reads KEYSHARE_CHURN_SEED (0 when unset).
func testSeed() uint64 {
	s, _ := strconv.ParseUint(os.Getenv("KEYSHARE_CHURN_SEED"), 10, 64)
	return s
}
