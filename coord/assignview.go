package coord

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// assignmentView is a member's watch-fed view of what it owns, so that an
// assignment change costs the member O(changed ranges), not a read of the
// whole group: it reads the range records, registrations and generation
// once, then follows them with watches, and reads a ledger entry only for
// a range of its own whose record changed, at the revision of that change.
//
// It does not watch the ledger: every ledger write by anyone but the owner
// (the leader's handoff, split or reset) rewrites the range record in the
// same transaction, so a range's entry changes under its owner only by the
// owner's own flushes. (The leader's groupCache watches the whole group,
// ledger included, and rebuilds a Snapshot of it: right for the leader, but
// every member following every flush of the group would be the O(group)
// cost this view removes.)
type assignmentView struct {
	cli    *clientv3.Client
	schema schema.Keys
	id     string // the member
	maxOps int    // reads per transaction
	log    hclog.Logger
	// publish receives the assignment each time the member's ranges
	// change. It is called under mu, so that assignments go out in the
	// order they were made (the watch loop and the member's releases both
	// publish); it must not block.
	publish func(schema.Assignment)

	mu struct {
		sync.Mutex
		records map[string]viewRecord                         // every readable range record, by key
		byTP    map[assign.TopicPartition]map[string]struct{} // range keys by partition
		owned   map[string]schema.RangeState                  // the member's, with ledger state
		// ownedByTP holds the keys of owned by partition.
		ownedByTP map[assign.TopicPartition]map[string]struct{}
		members   map[string]schema.Member // live registrations, by member id
		// since is the create revision of the member's registration as
		// the view first read it: a range record naming the member but
		// older than that was written for an earlier registration under
		// the same id, and is not the member's until the leader fails it
		// over, FailoverGrace after that registration went (grace.go).
		since int64
		// byOwner counts the range records (any state) of each owner.
		byOwner map[string]int
		// mineByTP counts the range records (any state) naming this
		// member in each partition: a partition where none does (most of
		// them, in a large group) is not looked at when it changes.
		mineByTP map[assign.TopicPartition]int
		// released maps the ranges this member has released to the
		// revision of the record it released them from, until the watch
		// brings the release: an assignment published in between must
		// not hand them back to the member (its drains are done with
		// them; a second release would only be fenced).
		released map[string]int64
		// leaveDrain is set once the member leaves (Session.Leave): every
		// range it owns is shown as revoking, with this budget.
		leaveDrain time.Duration
		gen        schema.GenerationRecord
		rev        int64 // the member's ranges are known through rev
		seen       int64 // range events are applied through seen (refresh moves rev there)
		ready      bool
		wake       chan struct{} // closed and replaced on every change
	}
}

type viewRecord struct {
	rec schema.RangeRecord
	rev int64 // ModRevision of the range key
}

func newAssignmentView(cli *clientv3.Client, s schema.Keys, id string, maxOps int, log hclog.Logger, publish func(schema.Assignment)) *assignmentView {
	if maxOps <= 0 {
		maxOps = DefaultMaxTxnOps
	}
	v := &assignmentView{cli: cli, schema: s, id: id, maxOps: maxOps, log: log, publish: publish}
	v.mu.wake = make(chan struct{})
	v.mu.released = make(map[string]int64)
	return v
}

// refresh recomputes the member's ranges in the touched partitions, reads
// the ledger entries of those whose record changed, and publishes the
// assignment if it changed. Its cost is in the touched partitions only.
func (v *assignmentView) refresh(ctx context.Context, touched map[assign.TopicPartition]bool) error {
	v.mu.Lock()
	rev := v.mu.seen
	want := make(map[string]viewRecord)
	var gone []string
	for tp := range touched {
		var mine []string
		if v.mu.mineByTP[tp] > 0 {
			mine = v.ownedInLocked(v.mu.records, v.mu.byTP, tp)
		}
		for _, k := range mine {
			if r := v.mu.records[k]; v.mu.owned[k].Rev != r.rev {
				want[k] = r
			}
		}
		for k := range v.mu.ownedByTP[tp] {
			if !slices.Contains(mine, k) {
				gone = append(gone, k)
			}
		}
	}
	v.mu.Unlock()
	// At rev the records are as read; a ledger entry read there is the
	// one written with its record or later by this member's own flushes.
	read, err := v.readEntries(ctx, want, rev)
	if err != nil {
		return err
	}
	v.mu.Lock()
	for _, k := range gone {
		v.dropOwnedLocked(k)
	}
	for _, rs := range read {
		if v.mu.released[rs.Key] != rs.Rev { // released while it was read
			v.setOwnedLocked(rs)
		}
	}
	v.mu.rev = max(v.mu.rev, rev)
	changed := len(gone) > 0 || len(read) > 0
	if changed {
		v.publish(v.assignmentLocked())
	}
	v.changedLocked()
	v.mu.Unlock()
	return nil
}

// ownedInLocked returns the keys of the member's ranges (active or
// revoking, and not released by it already) in partition tp. As in a
// Snapshot, a record that overlaps an earlier-starting record of its
// partition is damaged and left out, so no hash has two owners.
func (v *assignmentView) ownedInLocked(records map[string]viewRecord, byTP map[assign.TopicPartition]map[string]struct{}, tp assign.TopicPartition) []string {
	// Sorted by first hash, each record looked up once: with 200 members
	// sharing 16 partitions a partition has hundreds of ranges, and every
	// member sorts the partitions each leader round touches.
	type entry struct {
		key string
		r   viewRecord
	}
	list := make([]entry, 0, len(byTP[tp]))
	for k := range byTP[tp] {
		list = append(list, entry{k, records[k]})
	}
	slices.SortFunc(list, func(a, b entry) int { return cmp.Compare(a.r.rec.Lo, b.r.rec.Lo) })
	var mine []string
	var hi uint64
	for i, e := range list {
		rec := e.r.rec
		if i > 0 && hi > rec.Lo {
			continue // overlaps the kept record before it
		}
		hi = rec.Hi
		if rec.Owner == v.id && rec.State != schema.StateReleased && v.mu.released[e.key] != e.r.rev && e.r.rev >= v.mu.since {
			mine = append(mine, e.key)
		}
	}
	return mine
}

// readEntries reads the ledger entries of want at revision rev, in
// transactions of at most maxOps reads, up to recordInFlight at once (a
// member taking 2,048 ranges reads 16 transactions' worth), and returns the
// ranges with them.
func (v *assignmentView) readEntries(ctx context.Context, want map[string]viewRecord, rev int64) (map[string]schema.RangeState, error) {
	out := make(map[string]schema.RangeState, len(want))
	pending := make([]schema.RangeState, 0, len(want))
	for k, r := range want {
		pending = append(pending, schema.RangeState{Key: k, Record: r.rec, Rev: r.rev, LedgerKey: v.schema.LedgerEntry(r.rec.Topic, r.rec.Partition, r.rec.Lo)})
	}
	var batches [][]schema.RangeState
	for len(pending) > 0 {
		batch := pending[:min(v.maxOps, len(pending))]
		pending = pending[len(batch):]
		batches = append(batches, batch)
	}
	var (
		mu    sync.Mutex
		first error
	)
	eachInFlight(batches, nil, func(_ int, batch []schema.RangeState) {
		ops := make([]clientv3.Op, len(batch))
		for i, rs := range batch {
			ops[i] = clientv3.OpGet(rs.LedgerKey, clientv3.WithRev(rev))
		}
		resp, err := v.cli.Txn(ctx).Then(ops...).Commit()
		if err == nil {
			for i := range batch {
				if kvs := resp.Responses[i].GetResponseRange().Kvs; len(kvs) == 1 {
					rs := &batch[i]
					rs.EntryRev = kvs[0].ModRevision
					rs.Entry, rs.EntryErr = ledger.Decode(rs.LedgerKey, kvs[0].Value, rs.Record.Range())
				}
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if first == nil {
				first = fmt.Errorf("coord: read %d ledger entries at revision %d: %w", len(batch), rev, err)
			}
			return
		}
		for _, rs := range batch {
			out[rs.Key] = rs
		}
	})
	if first != nil {
		return nil, first
	}
	return out, nil
}

// noteReleased takes ranges the member has just released out of its
// assignment at once, rather than when the watch brings the release, and
// publishes the assignment without them.
func (v *assignmentView) noteReleased(ranges []schema.RangeState) {
	v.mu.Lock()
	if !v.mu.ready {
		v.mu.Unlock()
		return
	}
	changed := false
	for _, rs := range ranges {
		if r, ok := v.mu.records[rs.Key]; ok && r.rev != rs.Rev {
			continue // the watch has already moved past that record
		}
		v.mu.released[rs.Key] = rs.Rev
		if o, ok := v.mu.owned[rs.Key]; ok && o.Rev == rs.Rev {
			v.dropOwnedLocked(rs.Key)
			changed = true
		}
	}
	if changed {
		v.publish(v.assignmentLocked())
	}
	v.changedLocked()
	v.mu.Unlock()
}

func (v *assignmentView) setOwnedLocked(rs schema.RangeState) {
	v.mu.owned[rs.Key] = rs
	addKey(v.mu.ownedByTP, rs.TP(), rs.Key)
}

func (v *assignmentView) dropOwnedLocked(key string) {
	if rs, ok := v.mu.owned[key]; ok {
		delete(v.mu.owned, key)
		delete(v.mu.ownedByTP[rs.TP()], key)
	}
}

// leave shows every range the member owns, now and later, as revoking with
// budget drain, and publishes the assignment: a leaving member drains and
// releases its ranges on its own, with no revoke written by the leader.
func (v *assignmentView) leave(drain time.Duration) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.mu.leaveDrain = drain
	if v.mu.ready {
		v.publish(v.assignmentLocked())
		v.changedLocked()
	}
}

// assignmentLocked is the member's assignment as the view holds it, in
// partition and hash order, leaving out ranges whose ledger entry is
// damaged (the leader resets those first), as Snapshot.AssignmentOf does.
// Once the member leaves, its active ranges are shown as revoking (leave).
func (v *assignmentView) assignmentLocked() schema.Assignment {
	a := schema.Assignment{Generation: v.mu.gen.Generation, Rev: v.mu.rev}
	for _, rs := range v.mu.owned {
		if rs.EntryErr != nil {
			continue
		}
		if v.mu.leaveDrain > 0 && rs.Record.State == schema.StateActive {
			// The record in etcd stays active: the release is guarded
			// by its revision, which this copy keeps.
			rs.Record.State, rs.Record.Target = schema.StateRevoking, ""
			rs.Record.DrainMs = v.mu.leaveDrain.Milliseconds()
		}
		a.Ranges = append(a.Ranges, rs)
	}
	slices.SortFunc(a.Ranges, func(x, y schema.RangeState) int {
		if c := assign.CompareTP(x.TP(), y.TP()); c != 0 {
			return c
		}
		return cmp.Compare(x.Record.Lo, y.Record.Lo)
	})
	return a
}

func (v *assignmentView) changedLocked() {
	close(v.mu.wake)
	v.mu.wake = make(chan struct{})
}

// current returns the assignment once the view holds revision rev (or
// ctx ends).
func (v *assignmentView) current(ctx context.Context, rev int64) (schema.Assignment, error) {
	for {
		v.mu.Lock()
		if v.mu.ready && v.mu.rev >= rev {
			a := v.assignmentLocked()
			v.mu.Unlock()
			return a, nil
		}
		wake := v.mu.wake
		v.mu.Unlock()
		select {
		case <-ctx.Done():
			return schema.Assignment{}, ctx.Err()
		case <-wake:
		}
	}
}

// released waits until no range record names the member as its owner
// any more, released ones included, or until no other member that is not
// leaving remains to take its ranges. Waiting for the handoff of released
// ranges, not only for their release, keeps the member registered until
// the leader has given them away: a member gone sooner turns the handoff
// of what it released into a failover, held back by FailoverGrace.
func (v *assignmentView) released(ctx context.Context) error {
	for {
		v.mu.Lock()
		done, wake := v.releasedLocked(), v.mu.wake
		v.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		}
	}
}

// isReleased is released without waiting.
func (v *assignmentView) isReleased() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.releasedLocked()
}

func (v *assignmentView) releasedLocked() bool {
	if !v.mu.ready {
		return false
	}
	if len(v.mu.owned) == 0 && v.mu.byOwner[v.id] == 0 {
		return true
	}
	for id, m := range v.mu.members {
		if id != v.id && !m.Leaving {
			return false
		}
	}
	return true
}

func addKey(m map[assign.TopicPartition]map[string]struct{}, tp assign.TopicPartition, key string) {
	if m[tp] == nil {
		m[tp] = make(map[string]struct{})
	}
	m[tp][key] = struct{}{}
}
