package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// How a member's assignment view follows etcd: one read of the range
// records, registrations and generation, then a watch on each; every event
// marks the partitions it touched, which refresh (assignview.go) recomputes.

// run keeps the view current until ctx ends, reading everything again when
// a watch fails (compaction, etcd leader lost).
func (v *assignmentView) run(ctx context.Context) {
	readAndWatch(ctx, v.log, "the member's assignment", v.load, v.follow)
}

// load reads the range records, registrations and generation in one
// transaction, and the member's ledger entries at the same revision.
func (v *assignmentView) load(ctx context.Context) (int64, error) {
	s := v.schema
	resp, err := v.cli.Txn(ctx).Then(
		clientv3.OpGet(s.Ranges(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Members(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Generation()),
	).Commit()
	if err != nil {
		return 0, fmt.Errorf("coord: read range records under %s: %w", s.Ranges(), err)
	}
	rev := resp.Header.Revision
	records := make(map[string]viewRecord)
	byTP := make(map[assign.TopicPartition]map[string]struct{})
	byOwner := make(map[string]int)
	mineByTP := make(map[assign.TopicPartition]int)
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		if rec, err := decodeRange(s, string(kv.Key), kv.Value, kv.ModRevision); err == nil {
			records[string(kv.Key)] = viewRecord{rec, kv.ModRevision}
			addKey(byTP, assign.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}, string(kv.Key))
			byOwner[rec.Owner]++
			if rec.Owner == v.id {
				mineByTP[assign.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}]++
			}
		}
	}
	members := make(map[string]schema.Member)
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		if m, ok := v.member(kv); ok {
			members[m.ID] = m
		}
	}
	var gen schema.GenerationRecord
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) == 1 {
		gen, _ = schema.DecodeGeneration(string(kvs[0].Key), kvs[0].Value)
	}
	want := make(map[string]viewRecord)
	v.mu.Lock()
	if m, ok := members[v.id]; ok && v.mu.since == 0 {
		v.mu.since = m.CreateRev
	}
	for tp := range mineByTP {
		for _, k := range v.ownedInLocked(records, byTP, tp) {
			want[k] = records[k]
		}
	}
	v.mu.Unlock()
	owned, err := v.readEntries(ctx, want, rev)
	if err != nil {
		return 0, err
	}
	v.mu.Lock()
	v.mu.records, v.mu.byTP, v.mu.members, v.mu.gen, v.mu.byOwner, v.mu.mineByTP = records, byTP, members, gen, byOwner, mineByTP
	v.mu.owned, v.mu.ownedByTP = make(map[string]schema.RangeState), make(map[assign.TopicPartition]map[string]struct{})
	for _, rs := range owned {
		if v.mu.released[rs.Key] != rs.Rev {
			v.setOwnedLocked(rs)
		}
	}
	for k, rev := range v.mu.released {
		if records[k].rev != rev {
			delete(v.mu.released, k) // the read is past the release
		}
	}
	v.mu.rev, v.mu.seen, v.mu.ready = rev, rev, true
	v.publish(v.assignmentLocked())
	v.changedLocked()
	v.mu.Unlock()
	return rev, nil
}

// follow applies the watches' events from rev+1 until a watch fails.
func (v *assignmentView) follow(ctx context.Context, rev int64) error {
	s := v.schema
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ranges := v.cli.Watch(wctx, s.Ranges(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	members := v.cli.Watch(wctx, s.Members(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	gen := v.cli.Watch(wctx, s.Generation(), clientv3.WithRev(rev+1))
	touched := make(map[assign.TopicPartition]bool)
	var coalesce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-ranges:
			if err := watchErr(wr, ok); err != nil {
				return err
			}
			v.applyRanges(wr, touched)
			if len(touched) > 0 && coalesce == nil {
				// One leader round is several transactions: wait briefly
				// so that it makes one update.
				coalesce = time.After(20 * time.Millisecond)
			}
		case wr, ok := <-members:
			if err := watchErr(wr, ok); err != nil {
				return err
			}
			v.applyMembers(wr)
		case wr, ok := <-gen:
			if err := watchErr(wr, ok); err != nil {
				return err
			}
			v.applyGeneration(wr)
		case <-coalesce:
			coalesce = nil
			if err := v.refresh(ctx, touched); err != nil {
				return err
			}
			clear(touched)
		}
	}
}

func watchErr(wr clientv3.WatchResponse, ok bool) error {
	switch {
	case !ok:
		return errors.New("watch channel closed")
	case wr.CompactRevision != 0:
		return fmt.Errorf("revision %d compacted", wr.CompactRevision)
	}
	return wr.Err()
}

// applyRanges records the range events of wr and the partitions they touch.
func (v *assignmentView) applyRanges(wr clientv3.WatchResponse, touched map[assign.TopicPartition]bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ev := range wr.Events {
		key := string(ev.Kv.Key)
		delete(v.mu.released, key) // the record moved on from the release
		if old, ok := v.mu.records[key]; ok {
			tp := assign.TopicPartition{Topic: old.rec.Topic, Partition: old.rec.Partition}
			delete(v.mu.records, key)
			delete(v.mu.byTP[tp], key)
			v.mu.byOwner[old.rec.Owner]--
			if old.rec.Owner == v.id {
				v.mu.mineByTP[tp]--
			}
			touched[tp] = true
		}
		if ev.Type == clientv3.EventTypePut {
			if rec, err := decodeRange(v.schema, key, ev.Kv.Value, ev.Kv.ModRevision); err == nil {
				tp := assign.TopicPartition{Topic: rec.Topic, Partition: rec.Partition}
				v.mu.records[key] = viewRecord{rec, ev.Kv.ModRevision}
				addKey(v.mu.byTP, tp, key)
				v.mu.byOwner[rec.Owner]++
				if rec.Owner == v.id {
					v.mu.mineByTP[tp]++
				}
				touched[tp] = true
			} else {
				// A damaged record is in no view (see Snapshot.BadRanges),
				// but it may have replaced one of ours.
				if tp, ok := v.partitionOf(key); ok {
					touched[tp] = true
				}
			}
		}
		v.mu.seen = max(v.mu.seen, ev.Kv.ModRevision)
	}
	if wr.IsProgressNotify() {
		// Every range event up to the header's revision has been sent.
		v.mu.seen = max(v.mu.seen, wr.Header.Revision)
	}
	if len(touched) == 0 && v.mu.seen > v.mu.rev {
		// Nothing of ours to refresh: the view is current through seen.
		v.mu.rev = v.mu.seen
		v.changedLocked()
	}
}

// partitionOf parses the partition of a range key.
func (v *assignmentView) partitionOf(key string) (assign.TopicPartition, bool) {
	topic, part, _, err := schema.ParseRangeKey(v.schema.Ranges(), key)
	return assign.TopicPartition{Topic: topic, Partition: part}, err == nil
}

func (v *assignmentView) applyMembers(wr clientv3.WatchResponse) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ev := range wr.Events {
		delete(v.mu.members, strings.TrimPrefix(string(ev.Kv.Key), v.schema.Members()))
		if ev.Type == clientv3.EventTypePut {
			if m, ok := v.member(ev.Kv); ok {
				v.mu.members[m.ID] = m
			}
		}
	}
	v.changedLocked()
}

func (v *assignmentView) applyGeneration(wr clientv3.WatchResponse) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, ev := range wr.Events {
		if ev.Type == clientv3.EventTypePut {
			if g, err := schema.DecodeGeneration(string(ev.Kv.Key), ev.Kv.Value); err == nil {
				grew := g.Generation > v.mu.gen.Generation
				v.mu.gen = g
				// Most generations change none of this member's ranges
				// (or their events came first): publish anyway, or its
				// status and keyshare_generation stay behind the group's.
				if grew && v.mu.ready {
					v.publish(v.assignmentLocked())
					v.changedLocked()
				}
			}
		}
	}
}

// member decodes a registration; one without a lease is no member (see
// Snapshot.BadMembers).
func (v *assignmentView) member(kv *mvccpb.KeyValue) (schema.Member, bool) {
	if kv.Lease == 0 {
		return schema.Member{}, false
	}
	m, err := decodeMember(v.schema, string(kv.Key), kv.Value)
	if err != nil {
		return schema.Member{}, false
	}
	return schema.Member{MemberInfo: m, CreateRev: kv.CreateRevision}, true
}
