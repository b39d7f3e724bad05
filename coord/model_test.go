package coord

// The model: an in-memory etcd (keys with create and mod revisions and
// leases, transactions with compares and etcd's --max-txn-ops limit) holding
// one group. Random steps join members (up to 200 on one partition), mark
// them leaving, crash them, let owners release revoked ranges, move the
// clock, and write damaged values (overlapping range records, bad JSON,
// members without a lease, absurd weights). After each step the leader runs
// one round: plan() on the snapshot the model gives (the same decoding as
// ReadSnapshot), each change applied as one transaction, with merges and
// the contiguous layout allowed or not at random (settle.go). Every snapshot is
// checked: no hash is in two members' AssignmentOf. When the steps end, the
// leader runs rounds without disturbance: within maxRounds every hash of
// every partition must be owned, active, by a live member that is not
// leaving, and no repairable damage may remain.

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"pgregory.net/rapid"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// modelStore is an in-memory etcd key space.
type modelStore struct {
	rev   int64
	kv    map[string]*mvccpb.KeyValue
	lease int64 // last lease id handed out

	snap *schema.Snapshot // decoded at snap.Rev
}

func newModelStore() *modelStore { return &modelStore{rev: 1, kv: make(map[string]*mvccpb.KeyValue)} }

func (m *modelStore) put(key, value string, lease int64) {
	m.rev++
	m.write(key, value, lease)
}

// write puts at the current revision (the caller bumped it).
func (m *modelStore) write(key, value string, lease int64) {
	kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), ModRevision: m.rev, CreateRevision: m.rev, Lease: lease, Version: 1}
	if old, ok := m.kv[key]; ok {
		kv.CreateRevision, kv.Version = old.CreateRevision, old.Version+1
	}
	m.kv[key] = kv
}

func (m *modelStore) del(key string) {
	if _, ok := m.kv[key]; ok {
		m.rev++
		delete(m.kv, key)
	}
}

// txn applies ops if every compare holds, as etcd does; it refuses a
// transaction over maxOps operations or compares.
func (m *modelStore) txn(cmps []clientv3.Cmp, ops []clientv3.Op, maxOps int) (bool, error) {
	if len(ops) > maxOps || len(cmps) > maxOps {
		return false, fmt.Errorf("etcdserver: too many operations in txn request (%d ops, %d compares, limit %d)", len(ops), len(cmps), maxOps)
	}
	for _, c := range cmps {
		pc := c.GetCompare()
		var have, want int64
		kv := m.kv[string(pc.Key)]
		switch pc.Target {
		case pb.Compare_MOD:
			want = pc.GetModRevision()
			if kv != nil {
				have = kv.ModRevision
			}
		case pb.Compare_CREATE:
			want = pc.GetCreateRevision()
			if kv != nil {
				have = kv.CreateRevision
			}
		default:
			return false, fmt.Errorf("model: compare target %v not modelled", pc.Target)
		}
		if pc.Result != pb.Compare_EQUAL {
			return false, fmt.Errorf("model: compare result %v not modelled", pc.Result)
		}
		if have != want {
			return false, nil
		}
	}
	m.rev++
	for _, op := range ops {
		switch {
		case op.IsPut():
			m.write(string(op.KeyBytes()), string(op.ValueBytes()), 0)
		case op.IsDelete() && len(op.RangeBytes()) == 0:
			delete(m.kv, string(op.KeyBytes()))
		default:
			return false, fmt.Errorf("model: op on %q not modelled", op.KeyBytes())
		}
	}
	return true, nil
}

// apply applies one planned change as one transaction, through apply's
// adapter (change.txn), as the leader does.
func (m *modelStore) apply(c plan.Change, maxOps int) (bool, error) {
	cmps, ops := txnOf(c)
	return m.txn(cmps, ops, maxOps)
}

// snapshot decodes the store the way ReadSnapshot decodes etcd.
func (m *modelStore) snapshot() *schema.Snapshot {
	if m.snap != nil && m.snap.Rev == m.rev {
		return m.snap
	}
	prefixes := []string{planSchema.Members(), planSchema.Ranges(), planSchema.Ledger(), planSchema.Commits(), planSchema.Generation(), planSchema.Stuck(), planSchema.Lost()}
	keys := make([]string, 0, len(m.kv))
	for k := range m.kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var kvs groupKVs
	for _, k := range keys {
		for i, p := range prefixes {
			if (i == 4 && k == p) || (i != 4 && strings.HasPrefix(k, p)) {
				kvs[i] = append(kvs[i], m.kv[k])
			}
		}
	}
	m.snap = buildSnapshot(planSchema, m.rev, kvs)
	return m.snap
}

// modelGroup is the model store plus what the test knows of its members.
type modelGroup struct {
	t       *rapid.T
	store   *modelStore
	parts   []assign.PartitionWeight
	live    map[string]int64 // live member id → its lease
	leaving map[string]bool
	next    int
	clock   time.Time // the leader's monotonic clock
	wall    time.Time
	seen    map[plan.RangeObs]time.Time
	defrag  bool // the leader lets merges and the contiguous layout start
}

const (
	modelMaxOps     = 128
	modelDrain      = 10 * time.Second
	modelGrace      = 2 * time.Second
	modelMaxMembers = 200
	// maxRounds bounds the rounds to settle once steps stop: a fill or
	// split of 200 pieces takes four rounds, a handoff three plus the
	// drain budget (at 5 s a round, three more), with room to spare.
	maxRounds = 60
)

// drawModelGroup is an empty group of one to maxPartitions partitions of
// topic "t", the number drawn by t.
func drawModelGroup(t *rapid.T, maxPartitions int32) *modelGroup {
	g := &modelGroup{
		t: t, store: newModelStore(), live: map[string]int64{}, leaving: map[string]bool{},
		clock: time.Now(), wall: time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), seen: map[plan.RangeObs]time.Time{},
	}
	for p := range rapid.Int32Range(1, maxPartitions).Draw(t, "partitions") {
		g.parts = append(g.parts, assign.PartitionWeight{TopicPartition: assign.TopicPartition{Topic: "t", Partition: p}})
	}
	return g
}

func (g *modelGroup) member(id string, weight int, leaving bool) string {
	return mustJSON(schema.MemberInfo{V: recordVersion, ID: id, Host: "h", PID: 1, Weight: weight, Leaving: leaving})
}

func (g *modelGroup) join(weight int) {
	id := fmt.Sprintf("m%03d", g.next)
	g.next++
	g.store.lease++
	g.live[id] = g.store.lease
	g.store.put(planSchema.Member(id), g.member(id, weight, false), g.store.lease)
}

// leave marks member id leaving, as its graceful leave does.
func (g *modelGroup) leave(id string) {
	g.leaving[id] = true
	g.store.put(planSchema.Member(id), g.member(id, 1, true), g.live[id])
}

// crash ends member id's session: its registration goes with its lease.
func (g *modelGroup) crash(id string) {
	g.store.del(planSchema.Member(id))
	delete(g.live, id)
	delete(g.leaving, id)
}

func (g *modelGroup) ids() []string {
	var out []string
	for id := range g.live {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// release lets owners that are alive release revoked ranges: all of them, or
// those the draws pick.
func (g *modelGroup) release(all bool) {
	snap := g.store.snapshot()
	for _, r := range snap.Ranges {
		if r.Record.State != schema.StateRevoking {
			continue
		}
		if _, ok := g.live[r.Record.Owner]; !ok {
			continue
		}
		if !all && !rapid.Bool().Draw(g.t, "release "+r.Key) {
			continue
		}
		rec := r.Record
		rec.State = schema.StateReleased
		ok, err := g.store.txn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.Rev)},
			[]clientv3.Op{clientv3.OpPut(r.Key, mustJSON(rec)), clientv3.OpPut(r.LedgerKey, string(ledger.Encode(r.Entry)))}, modelMaxOps)
		if err != nil || !ok {
			g.t.Fatalf("release %s: %v %v", r.Key, ok, err)
		}
	}
	g.check("release")
	// A leaving member that owns nothing closes.
	for _, id := range g.ids() {
		if g.leaving[id] && len(g.store.snapshot().Owned(id)) == 0 {
			g.store.del(planSchema.Member(id))
			delete(g.live, id)
			delete(g.leaving, id)
		}
	}
}

// round is one leader round: observe, plan, apply each change alone.
func (g *modelGroup) round() int {
	snap := g.store.snapshot()
	plan.Observe(g.seen, snap, g.clock)
	changes := plan.Plan(plan.Input{
		Schema: planSchema, Snap: snap, Parts: g.parts, Now: g.wall, DrainTimeout: modelDrain,
		Gen: snap.Generation.Generation + 1, MaxTxnOps: modelMaxOps, Clock: g.clock, Seen: g.seen, Grace: modelGrace,
		Defrag: g.defrag,
	})
	for i, c := range changes {
		// apply adds the leadership guard and the generation write.
		cmps, ops := txnOf(c)
		ok, err := g.store.txn(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision("/nonexistent"), "=", 0)}, cmps...),
			append([]clientv3.Op{clientv3.OpPut(planSchema.Generation(), mustJSON(schema.GenerationRecord{V: recordVersion, Generation: snap.Generation.Generation + 1}))}, ops...),
			modelMaxOps)
		if err != nil {
			g.t.Fatalf("change refused: %v: %.200s", err, c.What)
		}
		// Every state between transactions is one members may see.
		// Decoding the whole store is the model's cost: in rounds of
		// many changes, check every 32nd state (and the last).
		if ok && (len(changes) <= 16 || i%32 == 0) {
			g.check(c.What)
		}
	}
	g.checkOwners("round", true)
	return len(changes)
}

// check fails if any hash is in two members' assignments. After every
// transaction it looks at the union of all assignments (what AssignmentOf
// gives each owner: its ranges not released and with a readable ledger
// entry); with full, once a round, it calls AssignmentOf for every member
// and every owner named in a record.
func (g *modelGroup) check(after string) { g.checkOwners(after, false) }

func (g *modelGroup) checkOwners(after string, full bool) {
	snap := g.store.snapshot()
	type owned struct {
		r  ledger.HashRange
		id string
	}
	byTP := map[assign.TopicPartition][]owned{}
	if full {
		owners := map[string]bool{}
		for id := range snap.Members {
			owners[id] = true
		}
		for _, r := range snap.Ranges {
			owners[r.Record.Owner] = true
		}
		for id := range owners {
			for _, r := range snap.AssignmentOf(id).Ranges {
				byTP[r.TP()] = append(byTP[r.TP()], owned{r.Record.Range(), id})
			}
		}
	} else {
		for _, r := range snap.Ranges {
			if r.Record.State != schema.StateReleased && r.EntryErr == nil {
				byTP[r.TP()] = append(byTP[r.TP()], owned{r.Record.Range(), r.Record.Owner})
			}
		}
	}
	for tp, list := range byTP {
		slices.SortFunc(list, func(a, b owned) int { return cmp.Compare(a.r.Lo, b.r.Lo) })
		for i := 1; i < len(list); i++ {
			if list[i].r.Lo < list[i-1].r.Hi {
				g.t.Fatalf("after %s: %s/%d %s of %s overlaps %s of %s", after, tp.Topic, tp.Partition, list[i].r, list[i].id, list[i-1].r, list[i-1].id)
			}
		}
	}
}

// settled reports what is still wrong, or "" when every hash is owned,
// active, by a live member that is not leaving and no repairable damage is
// left.
func (g *modelGroup) settled() string {
	snap := g.store.snapshot()
	if len(snap.BadRanges) > 0 || len(snap.BadMembers) > 0 || len(snap.Orphans) > 0 {
		return fmt.Sprintf("damage left: %d bad ranges, %d bad members, %d orphans", len(snap.BadRanges), len(snap.BadMembers), len(snap.Orphans))
	}
	have := snap.Partitions()
	for _, p := range g.parts {
		at := uint64(0)
		for _, r := range have[p.TopicPartition] {
			m, ok := snap.Members[r.Record.Owner]
			switch {
			case r.Record.Lo != at:
				return fmt.Sprintf("%s/%d: gap at %d", p.Topic, p.Partition, at)
			case r.Record.State != schema.StateActive || !ok || m.Leaving || r.EntryErr != nil:
				return fmt.Sprintf("%s/%d %s: %s of %s (member %v, leaving %v)", p.Topic, p.Partition, r.Record.Range(), r.Record.State, r.Record.Owner, ok, m.Leaving)
			}
			at = r.Record.Hi
		}
		if at != ledger.HashSpace {
			return fmt.Sprintf("%s/%d: ranges end at %d", p.Topic, p.Partition, at)
		}
	}
	return ""
}

// damage writes one damaged value.
func (g *modelGroup) damage() {
	snap := g.store.snapshot()
	switch rapid.IntRange(0, 3).Draw(g.t, "damage") {
	case 0: // an overlapping record, for a live member or a stranger
		if len(snap.Ranges) == 0 {
			return
		}
		r := snap.Ranges[rapid.IntRange(0, len(snap.Ranges)-1).Draw(g.t, "overlap of")]
		if r.Record.Hi-r.Record.Lo < 2 {
			return
		}
		lo := r.Record.Lo + 1 + rapid.Uint64Range(0, r.Record.Hi-r.Record.Lo-2).Draw(g.t, "overlap lo")
		hi := rapid.Uint64Range(lo+1, ledger.HashSpace).Draw(g.t, "overlap hi")
		owner := "stranger"
		if ids := g.ids(); len(ids) > 0 {
			owner = rapid.SampledFrom(ids).Draw(g.t, "overlap owner")
		}
		rec := schema.RangeRecord{V: recordVersion, Topic: r.Record.Topic, Partition: r.Record.Partition, Lo: lo, Hi: hi, Owner: owner, State: schema.StateActive, Gen: 1, Since: g.wall}
		g.store.put(planSchema.Range(rec.Topic, rec.Partition, lo), mustJSON(rec), 0)
		if rapid.Bool().Draw(g.t, "overlap ledger") {
			g.store.put(planSchema.LedgerEntry(rec.Topic, rec.Partition, lo), string(ledger.Encode(ledger.Entry{})), 0)
		}
	case 1: // bad JSON at a range key, new or existing
		p := rapid.SampledFrom(g.parts).Draw(g.t, "bad json partition")
		lo := rapid.Uint64Range(0, ledger.HashSpace-1).Draw(g.t, "bad json lo")
		if len(snap.Ranges) > 0 && rapid.Bool().Draw(g.t, "bad json over a record") {
			r := snap.Ranges[rapid.IntRange(0, len(snap.Ranges)-1).Draw(g.t, "bad json of")]
			p.TopicPartition, lo = r.TP(), r.Record.Lo
		}
		g.store.put(planSchema.Range(p.Topic, p.Partition, lo), "{not json", 0)
	case 2: // a member key without a lease
		id := fmt.Sprintf("ghost%d", g.next)
		g.next++
		g.store.put(planSchema.Member(id), g.member(id, 1, false), 0)
	case 3: // an absurd weight, under a lease (it goes with the session)
		id := fmt.Sprintf("heavy%d", g.next)
		g.next++
		g.store.lease++
		g.store.put(planSchema.Member(id), g.member(id, rapid.SampledFrom([]int{math.MaxInt64, assign.MaxWeight + 1}).Draw(g.t, "absurd weight"), false), g.store.lease)
	}
	g.check("damage")
}

var planSchema = schema.Group{Prefix: "/keyshare", Name: "g"}.Keys()
