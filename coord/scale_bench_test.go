package coord

import (
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// The leader's pure work at scale: the assignor, the planner and
// the decoding of the group's state, at P = 4,096 partitions with M = 200
// members, and with 200 members on one partition. Run with
//
//	go test -run '^$' -bench 'Scale' -benchmem ./coord/

func scaleParts(p int) []assign.PartitionWeight {
	out := make([]assign.PartitionWeight, p)
	for i := range out {
		out[i] = assign.PartitionWeight{TopicPartition: assign.TopicPartition{Topic: fmt.Sprintf("t%d", i%4), Partition: int32(i / 4)}}
	}
	return out
}

func scaleMembers(m int) []assign.MemberWeight {
	out := make([]assign.MemberWeight, m)
	for i := range out {
		out[i] = assign.MemberWeight{ID: fmt.Sprintf("m%03d", i), Weight: 1}
	}
	return out
}

// scaleSnapshot is a settled group: the assignor's fresh cut, every range
// active with ledger state.
func scaleSnapshot(parts []assign.PartitionWeight, members []assign.MemberWeight) *schema.Snapshot {
	snap := &schema.Snapshot{Members: make(map[string]schema.Member), BadRanges: map[string]int64{}, BadMembers: map[string]int64{}, Commits: map[assign.TopicPartition]schema.CommitRecord{}, CommitRevs: map[assign.TopicPartition]int64{}}
	for _, m := range members {
		snap.Members[m.ID] = schema.Member{MemberInfo: schema.MemberInfo{V: 1, ID: m.ID, Weight: 1}, CreateRev: 1}
	}
	rev := int64(10)
	for _, s := range assign.Assign(parts, members, nil) {
		rev++
		snap.Ranges = append(snap.Ranges, schema.RangeState{
			Key:       planSchema.Range(s.Topic, s.Partition, s.Range.Lo),
			Record:    schema.RangeRecord{V: 1, Topic: s.Topic, Partition: s.Partition, Lo: s.Range.Lo, Hi: s.Range.Hi, Owner: s.Owner, State: schema.StateActive, Gen: 1},
			Rev:       rev,
			LedgerKey: planSchema.LedgerEntry(s.Topic, s.Partition, s.Range.Lo),
			Entry:     ledger.Entry{Segments: []ledger.Segment{{Lo: s.Range.Lo, Hi: s.Range.Hi, Next: 1000, Pending: []int64{990, 995}}}},
			EntryRev:  rev,
		})
	}
	snap.Rev = rev
	return snap
}

// kvsOf is snap as etcd would return it, for buildSnapshot.
func kvsOf(snap *schema.Snapshot) groupKVs {
	var kvs groupKVs
	for _, m := range snap.Members {
		kvs[0] = append(kvs[0], &mvccpb.KeyValue{Key: []byte(planSchema.Member(m.ID)), Value: []byte(mustJSON(m.MemberInfo)), Lease: 1, CreateRevision: 1, ModRevision: 1})
	}
	for _, r := range snap.Ranges {
		kvs[1] = append(kvs[1], &mvccpb.KeyValue{Key: []byte(r.Key), Value: []byte(mustJSON(r.Record)), ModRevision: r.Rev})
		kvs[2] = append(kvs[2], &mvccpb.KeyValue{Key: []byte(r.LedgerKey), Value: ledger.Encode(r.Entry), ModRevision: r.EntryRev})
	}
	return kvs
}

var scaleCases = []struct {
	name string
	p, m int
}{
	{"P=4096,M=200", 4096, 200},
	{"P=4096,M=16", 4096, 16},
	{"P=1,M=200", 1, 200},
	{"P=16,M=2", 16, 2},
}

func BenchmarkScaleAssign(b *testing.B) {
	for _, c := range scaleCases {
		parts, members := scaleParts(c.p), scaleMembers(c.m)
		prev := scaleSnapshot(parts, members).Slices()
		b.Run(c.name+"/fresh", func(b *testing.B) {
			for b.Loop() {
				assign.Assign(parts, members, nil)
			}
		})
		b.Run(c.name+"/steady", func(b *testing.B) {
			for b.Loop() {
				assign.Assign(parts, members, prev)
			}
		})
		b.Run(c.name+"/one-leaves", func(b *testing.B) {
			for b.Loop() {
				assign.Assign(parts, members[1:], prev)
			}
		})
		b.Run(c.name+"/one-joins", func(b *testing.B) {
			more := append(members[:len(members):len(members)], assign.MemberWeight{ID: "zz-new", Weight: 1})
			for b.Loop() {
				assign.Assign(parts, more, prev)
			}
		})
	}
}

func BenchmarkScalePlan(b *testing.B) {
	for _, c := range scaleCases {
		parts, members := scaleParts(c.p), scaleMembers(c.m)
		snap := scaleSnapshot(parts, members)
		in := plan.Input{Schema: planSchema, Snap: snap, Parts: parts, Now: time.Now(), DrainTimeout: time.Second, Gen: 2, MaxTxnOps: 128, Clock: time.Now(), Seen: map[plan.RangeObs]time.Time{}, Grace: time.Second}
		b.Run(c.name+"/steady", func(b *testing.B) {
			var n int
			for b.Loop() {
				ch := plan.Plan(in)
				n = len(ch)
			}
			b.ReportMetric(float64(n), "changes")
		})
		gone := *snap
		gone.Members = make(map[string]schema.Member)
		for id, m := range snap.Members {
			if id != members[0].ID {
				gone.Members[id] = m
			}
		}
		b.Run(c.name+"/one-crashed", func(b *testing.B) {
			in := in
			in.Snap = &gone
			var n int
			for b.Loop() {
				ch := plan.Plan(in)
				n = len(ch)
			}
			b.ReportMetric(float64(n), "changes")
		})
	}
}

// BenchmarkScaleSnapshot is the cost of decoding the group's state: what
// the leader's cache pays once per change of revision, and what every
// ReadSnapshot caller pays per read.
func BenchmarkScaleSnapshot(b *testing.B) {
	for _, c := range scaleCases {
		kvs := kvsOf(scaleSnapshot(scaleParts(c.p), scaleMembers(c.m)))
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				buildSnapshot(planSchema, 100, kvs)
			}
		})
		b.Run(c.name+"/cached-one-change", func(b *testing.B) {
			// The leader's cache: one ledger entry changed since the
			// last build.
			memo := schema.NewDecodeMemo()
			buildSnapshotMemo(planSchema, 100, kvs, memo)
			for b.Loop() {
				kvs[2][0].ModRevision++
				buildSnapshotMemo(planSchema, 100, kvs, memo)
			}
		})
		b.Run(c.name+"/watermarks", func(b *testing.B) {
			snap := buildSnapshot(planSchema, 100, kvs)
			for b.Loop() {
				snap.Watermarks()
			}
		})
	}
}
