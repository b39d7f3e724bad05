package coord

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// groupCache is a watch-fed copy of a group's state, so that the leader's
// rounds cost no etcd round trip: it reads the group once, then applies the
// events of one watch on the group's prefix from that revision, and reads
// again when the watch fails (compaction, etcd leader lost, channel closed).
//
// It leaves lost/ out: those reports only ever grow, and no round reads
// them (status and the admin package read them with ReadSnapshot).
//
// It keeps the members' load reports (load/) apart, each with when it
// arrived on the leader's own clock: a report is news for the leader's load
// balance (loadbalancer.go), which runs on its own timer, never for the
// assignment round, so a report does not poke it (members report every few
// seconds; poking would defeat the quiet-round skip).
type groupCache struct {
	cli    *clientv3.Client
	schema schema.Keys
	log    hclog.Logger

	// assign is poked when a member or range key changes: the only changes
	// that can call for a new assignment.
	assign chan struct{}

	mu struct {
		sync.Mutex
		kvs   [len(groupKVs{}) - 1]map[string]*mvccpb.KeyValue // by groupKVs index; no lost/
		rev   int64                                            // the revision the copy is at
		ready bool
		snap  *schema.Snapshot // built at snapRev, reused while nothing changes
		// snapRev is the revision snap was built at.
		snapRev int64
		// assignRev is the revision of the last change to a member or
		// range key (or of the last full read).
		assignRev int64
		// memberRev is the revision of the last member key created or
		// deleted (or of the last full read): the joins and departures
		// the leader debounces. A registration turning Leaving is not
		// among them: the leaver releases its own ranges, and the leader
		// hands each off as it arrives (200 ms sooner).
		memberRev int64
		// memo holds the values decoded for the last snapshot.
		memo *schema.DecodeMemo
		// reloads counts full reads (the first, and each resync).
		reloads int
		// wake is closed and replaced on every change.
		wake chan struct{}
		// loads are the load/ keys, with when each version arrived.
		loads map[string]arrivedKV
		// leaves are the leaving/ keys (LeaveRecord), by key.
		leaves map[string]*mvccpb.KeyValue
		// handoffs are the handoff plans (handoffs/), by key, decoded
		// once per version: a plan of 2,048 ranges is 200 KB of JSON,
		// and a leave rebuilds the snapshot many times.
		handoffs map[string]storedHandoff
		// loadMemo holds the load reports decoded for the last snapshot.
		loadMemo map[string]decodedLoad
	}
}

// cacheMembers etc. index groupKVs.
const (
	cacheMembers = iota
	cacheRanges
	cacheLedger
	cacheCommits
	cacheGeneration
	cacheStuck
)

func newGroupCache(cli *clientv3.Client, s schema.Keys, log hclog.Logger) *groupCache {
	c := &groupCache{cli: cli, schema: s, log: log, assign: make(chan struct{}, 1)}
	c.mu.wake = make(chan struct{})
	c.mu.memo = schema.NewDecodeMemo()
	c.mu.loads = make(map[string]arrivedKV)
	c.mu.leaves = make(map[string]*mvccpb.KeyValue)
	c.mu.handoffs = make(map[string]storedHandoff)
	return c
}

// kind is the groupKVs index of key, or -1 for a key the cache does not keep.
func (c *groupCache) kind(key string) int {
	s := c.schema
	switch {
	case strings.HasPrefix(key, s.Ledger()):
		return cacheLedger
	case strings.HasPrefix(key, s.Ranges()):
		return cacheRanges
	case strings.HasPrefix(key, s.Members()):
		return cacheMembers
	case strings.HasPrefix(key, s.Commits()):
		return cacheCommits
	case key == s.Generation():
		return cacheGeneration
	case strings.HasPrefix(key, s.Stuck()):
		return cacheStuck
	}
	return -1
}

// run keeps the copy current until ctx ends.
func (c *groupCache) run(ctx context.Context) {
	readAndWatch(ctx, c.log, "the group state of the leader's cache", c.load, c.follow)
}

// readAndWatch reads a copy of some etcd state (load, which returns the
// revision it read at) and follows a watch from there (follow), and does
// both again whenever the watch ends (compaction, etcd's leader lost) or
// the read fails, until ctx ends.
func readAndWatch(ctx context.Context, log hclog.Logger, what string, load func(context.Context) (int64, error), follow func(context.Context, int64) error) {
	for ctx.Err() == nil {
		rev, err := load(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("read "+what+"; reading again", "error", err)
				sleep(ctx, 500*time.Millisecond)
			}
			continue
		}
		err = follow(ctx, rev)
		if ctx.Err() == nil {
			log.Info("watch of "+what+" ended; reading again", "error", err)
			sleep(ctx, 100*time.Millisecond)
		}
	}
}

// load reads the group (all but lost/) in one transaction.
func (c *groupCache) load(ctx context.Context) (int64, error) {
	s := c.schema
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := c.cli.Txn(rctx).Then(
		clientv3.OpGet(s.Members(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Ranges(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Ledger(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Commits(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Generation()),
		clientv3.OpGet(s.Stuck(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Loads(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Leavings(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Handoffs(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	for i := range c.mu.kvs {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		m := make(map[string]*mvccpb.KeyValue, len(kvs))
		for _, kv := range kvs {
			m[string(kv.Key)] = kv
		}
		c.mu.kvs[i] = m
	}
	now := time.Now()
	loads := make(map[string]arrivedKV)
	for _, kv := range resp.Responses[len(c.mu.kvs)].GetResponseRange().Kvs {
		// A report read again (a resync) keeps the time it first arrived.
		a := arrivedKV{kv: kv, at: now}
		if old, ok := c.mu.loads[string(kv.Key)]; ok && old.kv.ModRevision == kv.ModRevision {
			a.at = old.at
		}
		loads[string(kv.Key)] = a
	}
	c.mu.loads = loads
	c.mu.leaves = make(map[string]*mvccpb.KeyValue)
	for _, kv := range resp.Responses[len(c.mu.kvs)+1].GetResponseRange().Kvs {
		c.mu.leaves[string(kv.Key)] = kv
	}
	c.mu.handoffs = make(map[string]storedHandoff)
	for _, kv := range resp.Responses[len(c.mu.kvs)+2].GetResponseRange().Kvs {
		c.setHandoffLocked(kv)
	}
	c.mu.rev = resp.Header.Revision
	c.mu.assignRev = resp.Header.Revision
	c.mu.memberRev = resp.Header.Revision
	c.mu.ready = true
	c.mu.snap = nil
	c.mu.reloads++
	c.changedLocked()
	c.mu.Unlock()
	c.pokeAssign()
	return resp.Header.Revision, nil
}

// follow applies the watch's events from rev+1 until the watch fails.
func (c *groupCache) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := c.cli.Watch(wctx, c.schema.Root(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for wr := range wch {
		if wr.CompactRevision != 0 {
			return errors.New("revision compacted")
		}
		if err := wr.Err(); err != nil {
			return err
		}
		assign := false
		now := time.Now()
		c.mu.Lock()
		for _, ev := range wr.Events {
			if key := string(ev.Kv.Key); strings.HasPrefix(key, c.schema.Leavings()) {
				if ev.Type == clientv3.EventTypeDelete {
					delete(c.mu.leaves, key)
				} else {
					c.mu.leaves[key] = ev.Kv
				}
			} else if strings.HasPrefix(key, c.schema.Handoffs()) {
				if ev.Type == clientv3.EventTypeDelete {
					delete(c.mu.handoffs, key)
				} else {
					c.setHandoffLocked(ev.Kv)
				}
			} else if strings.HasPrefix(key, c.schema.Loads()) {
				if ev.Type == clientv3.EventTypeDelete {
					delete(c.mu.loads, key)
				} else {
					c.mu.loads[key] = arrivedKV{kv: ev.Kv, at: now}
				}
			}
			k := c.kind(string(ev.Kv.Key))
			if k >= 0 {
				if ev.Type == clientv3.EventTypeDelete {
					delete(c.mu.kvs[k], string(ev.Kv.Key))
				} else {
					c.mu.kvs[k][string(ev.Kv.Key)] = ev.Kv
				}
				if k == cacheMembers || k == cacheRanges {
					assign = true
					c.mu.assignRev = max(c.mu.assignRev, ev.Kv.ModRevision)
				}
				if k == cacheMembers && (ev.Type == clientv3.EventTypeDelete || ev.IsCreate()) {
					c.mu.memberRev = max(c.mu.memberRev, ev.Kv.ModRevision)
				}
			}
			c.mu.rev = max(c.mu.rev, ev.Kv.ModRevision)
		}
		if wr.IsProgressNotify() {
			// Every event up to the header's revision has been sent.
			c.mu.rev = max(c.mu.rev, wr.Header.Revision)
		}
		c.changedLocked()
		c.mu.Unlock()
		if assign {
			c.pokeAssign()
		}
	}
	return errors.New("watch channel closed")
}

func (c *groupCache) changedLocked() {
	close(c.mu.wake)
	c.mu.wake = make(chan struct{})
}

func (c *groupCache) pokeAssign() {
	select {
	case c.assign <- struct{}{}:
	default:
	}
}

// snapshot returns the group's state as the cache holds it, waiting for the
// first read. The snapshot is shared: callers must not change it.
func (c *groupCache) snapshot(ctx context.Context) (*schema.Snapshot, error) {
	for {
		c.mu.Lock()
		if c.mu.ready {
			if c.mu.snap == nil || c.mu.snapRev != c.mu.rev {
				var kvs groupKVs
				for i, m := range c.mu.kvs {
					list := make([]*mvccpb.KeyValue, 0, len(m))
					for _, kv := range m {
						list = append(list, kv)
					}
					// In key order, as a range read returns them.
					slices.SortFunc(list, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
					kvs[i] = list
				}
				snap := buildSnapshotMemo(c.schema, c.mu.rev, kvs, c.mu.memo)
				snap.Loads, snap.BadLoads, c.mu.loadMemo = decodeLoads(c.schema, c.mu.loads, snap.Members, c.mu.loadMemo)
				c.addLeavesLocked(snap)
				c.mu.snap, c.mu.snapRev = snap, c.mu.rev
			}
			snap := c.mu.snap
			c.mu.Unlock()
			return snap, nil
		}
		wake := c.mu.wake
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wake:
		}
	}
}

// assignRevision is the revision of the last change of a member or range
// key the cache has seen: while it stays, the assignor's input from etcd is
// the same.
func (c *groupCache) assignRevision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.assignRev
}

// memberRevision is the revision of the last member key the cache has seen
// created or deleted: a member joining, or its registration gone.
func (c *groupCache) memberRevision() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.memberRev
}

// waitRev waits until the copy holds revision rev (the leader's own write),
// or ctx ends; it reports whether it does.
func (c *groupCache) waitRev(ctx context.Context, rev int64) bool {
	for {
		c.mu.Lock()
		at, wake := c.mu.rev, c.mu.wake
		c.mu.Unlock()
		if at >= rev {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-wake:
		}
	}
}

// setHandoffLocked decodes a handoff plan. A damaged one keeps its
// revision, with no ranges: the leader writes it again.
func (c *groupCache) setHandoffLocked(kv *mvccpb.KeyValue) {
	h, err := schema.DecodeHandoff(string(kv.Key), kv.Value, kv.ModRevision)
	if err != nil {
		c.log.Warn("handoff plan unreadable; writing it again", "error", err)
	}
	c.mu.handoffs[string(kv.Key)] = h
}

// addLeavesLocked gives each leaving member of snap, a snapshot being built,
// its drain budget from leaving/<id> and its handoff plan. A damaged leave
// record counts as none: the leader then revokes the member's ranges, as
// for a member that wrote none.
func (c *groupCache) addLeavesLocked(snap *schema.Snapshot) {
	for key, h := range c.mu.handoffs {
		id := strings.TrimPrefix(key, c.schema.Handoffs())
		if m, ok := snap.Members[id]; ok {
			m.Handoff = h
			snap.Members[id] = m
		}
	}
	for key, kv := range c.mu.leaves {
		id := strings.TrimPrefix(key, c.schema.Leavings())
		m, ok := snap.Members[id]
		if !ok || !m.Leaving {
			continue
		}
		l, err := schema.DecodeLeave(key, kv.Value)
		if err != nil {
			snap.Problems = append(snap.Problems, err)
			continue
		}
		m.DrainMs = l.DrainMs
		snap.Members[id] = m
	}
}
