package coord

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Fragmentation after churn, on the planner alone (the model store of
// model_test.go, no etcd): random joins, graceful leaves and crashes, owners
// releasing at once, then rounds until nothing is left to do. Run with
//
//	go test -run '^$' -bench 'ChurnModel' -benchtime 1x ./coord/
//
// The figures are reported as metrics: ranges per partition (the largest,
// and the sum over partitions), owners per partition, and the reads (member,
// partition pairs: each is one fetch of the partition) against P + M − 1.

// churnModel is the model store and its leader, driven by a seeded random
// source instead of rapid.
type churnModel struct {
	store *modelStore
	parts []assign.PartitionWeight
	live  map[string]int64
	next  int
	clock time.Time
	seen  map[plan.RangeObs]time.Time
	still bool
}

func newChurnModel(p int) *churnModel {
	g := &churnModel{store: newModelStore(), live: map[string]int64{}, clock: time.Now(), seen: map[plan.RangeObs]time.Time{}}
	for i := range p {
		g.parts = append(g.parts, assign.PartitionWeight{TopicPartition: assign.TopicPartition{Topic: "t", Partition: int32(i)}})
	}
	return g
}

func (g *churnModel) join() {
	id := fmt.Sprintf("m%03d", g.next)
	g.next++
	g.store.lease++
	g.live[id] = g.store.lease
	g.store.put(planSchema.Member(id), mustJSON(schema.MemberInfo{V: recordVersion, ID: id, Host: "h", PID: 1, Weight: 1}), g.store.lease)
}

func (g *churnModel) leave(id string) {
	g.store.put(planSchema.Member(id), mustJSON(schema.MemberInfo{V: recordVersion, ID: id, Host: "h", PID: 1, Weight: 1, Leaving: true}), g.live[id])
}

func (g *churnModel) crash(id string) {
	g.store.del(planSchema.Member(id))
	delete(g.live, id)
}

// owners plays the members: each releases what is revoked from it (with a
// ledger entry, as a member that has run writes one), writes state for what
// it gained, and a leaving member that owns nothing closes.
func (g *churnModel) owners(b *testing.B) {
	snap := g.store.snapshot()
	for _, r := range snap.Ranges {
		if _, ok := g.live[r.Record.Owner]; !ok {
			continue
		}
		var ops []clientv3.Op
		switch {
		case r.Record.State == schema.StateRevoking:
			rec := r.Record
			rec.State = schema.StateReleased
			ops = append(ops, clientv3.OpPut(r.Key, mustJSON(rec)))
			fallthrough
		case !r.Entry.Initialized():
			e := ledger.Entry{Segments: []ledger.Segment{{Lo: r.Record.Lo, Hi: r.Record.Hi, Next: 100}}}
			ops = append(ops, clientv3.OpPut(r.LedgerKey, string(ledger.Encode(e))))
		}
		if len(ops) == 0 {
			continue
		}
		if ok, err := g.store.txn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.Rev)}, ops, modelMaxOps); err != nil || !ok {
			b.Fatalf("owner write %s: %v %v", r.Key, ok, err)
		}
	}
	for id := range g.live {
		m, ok := g.store.snapshot().Members[id]
		if ok && m.Leaving && len(g.store.snapshot().Owned(id)) == 0 {
			g.crash(id)
		}
	}
}

// round is one leader round, each change applied alone; it returns how many
// changes were planned.
func (g *churnModel) round(b *testing.B) int {
	snap := g.store.snapshot()
	plan.Observe(g.seen, snap, g.clock)
	changes := plan.Plan(plan.Input{
		Schema: planSchema, Snap: snap, Parts: g.parts, Now: g.clock, DrainTimeout: modelDrain,
		Gen: snap.Generation.Generation + 1, MaxTxnOps: modelMaxOps, Clock: g.clock, Seen: g.seen, Grace: modelGrace,
		Defrag: g.still,
	})
	for _, c := range changes {
		if _, err := g.store.apply(c, modelMaxOps); err != nil {
			b.Fatalf("change refused: %v: %s", err, c.What)
		}
	}
	g.clock = g.clock.Add(time.Second)
	return len(changes)
}

// settle runs leader rounds and owners until a round plans nothing; it
// returns the rounds taken.
func (g *churnModel) settle(b *testing.B) int {
	for i := 1; ; i++ {
		g.owners(b)
		if g.round(b) == 0 {
			return i
		}
		if i == 500 {
			b.Fatal("not settled after 500 rounds")
		}
	}
}

// fragmentation is the largest number of ranges of one partition, the sum,
// the largest number of owners of one partition, and the reads.
func (g *churnModel) fragmentation() (maxRanges, ranges, maxOwners, reads int) {
	for _, list := range g.store.snapshot().Partitions() {
		owners := map[string]bool{}
		for _, r := range list {
			owners[r.Record.Owner] = true
		}
		maxRanges, maxOwners = max(maxRanges, len(list)), max(maxOwners, len(owners))
		ranges += len(list)
		reads += len(owners)
	}
	return maxRanges, ranges, maxOwners, reads
}

// BenchmarkChurnModel: 200 random events (join, graceful leave, crash) on 4
// partitions, a leader round and the owners' answers after each, then
// settling with defragmentation allowed.
func BenchmarkChurnModel(b *testing.B) {
	for range b.N {
		rng := rand.New(rand.NewPCG(18, 18))
		g := newChurnModel(4)
		g.join()
		for range 200 {
			ids := make([]string, 0, len(g.live))
			for id := range g.live {
				ids = append(ids, id)
			}
			// Sorted, so that the seed alone decides the run.
			slices.Sort(ids)
			// Joins are likelier below 16 members: the group wanders
			// around benchmark 6's P = 4, M = 16.
			joinP := 30
			if len(ids) < 16 {
				joinP = 70
			}
			switch e := rng.IntN(100); {
			case len(ids) < 2 || e < joinP:
				g.join()
			case e%2 == 0:
				g.leave(ids[rng.IntN(len(ids))])
			default:
				g.crash(ids[rng.IntN(len(ids))])
			}
			g.still = rng.IntN(4) == 0 // now and then a pause long enough to defragment
			g.owners(b)
			g.round(b)
		}
		before, sumBefore, _, readsBefore := g.fragmentation()
		g.still = true
		rounds := g.settle(b)
		maxRanges, ranges, maxOwners, reads := g.fragmentation()
		m := len(g.live)
		b.ReportMetric(float64(before), "max-ranges/partition-before-settling")
		b.ReportMetric(float64(sumBefore), "ranges-before-settling")
		b.ReportMetric(float64(readsBefore)/4, "reads/P-before-settling")
		b.ReportMetric(float64(rounds), "settle-rounds")
		b.ReportMetric(float64(m), "members")
		b.ReportMetric(float64(maxRanges), "max-ranges/partition")
		b.ReportMetric(float64(maxOwners), "max-owners/partition")
		b.ReportMetric(float64(ranges), "ranges")
		b.ReportMetric(float64(reads)/4, "reads/P")
		b.ReportMetric(float64(4+m-1)/4, "bound(P+M-1)/P")
	}
}

// BenchmarkJoinsOneByOneModel: 65 members join one partition one at a time,
// the group settling after each join (the case that left 853 ranges).
func BenchmarkJoinsOneByOneModel(b *testing.B) {
	for range b.N {
		g := newChurnModel(1)
		g.still = true
		for range 65 {
			g.join()
			g.settle(b)
		}
		maxRanges, _, maxOwners, _ := g.fragmentation()
		b.ReportMetric(float64(maxRanges), "ranges")
		b.ReportMetric(float64(maxOwners), "owners")
	}
}
