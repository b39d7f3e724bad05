package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// rangeObserver follows a group's registrations and range records with one
// read and a watch, so that the scale bench's checks (settledFor, every 50
// to 100 ms while it times a leave) cost nothing in etcd per check. Reading
// the 4,096 range records each time (about 1 MB of JSON, decoded in the
// process that also runs etcd and kfake, on the same two cores as the
// members) slowed the very leave it timed.
type rangeObserver struct {
	g schema.Keys

	mu      sync.Mutex
	members map[string]schema.Member
	ranges  map[string]schema.RangeState
	err     error // the watch failed: the checks see it
}

// observeRanges starts a rangeObserver that follows the group until ctx
// ends.
func observeRanges(ctx context.Context, cli *clientv3.Client, s schema.Keys) (*rangeObserver, error) {
	o := &rangeObserver{g: s, members: make(map[string]schema.Member), ranges: make(map[string]schema.RangeState)}
	resp, err := cli.Txn(ctx).Then(
		clientv3.OpGet(s.Members(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Ranges(), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("read members and ranges: %w", err)
	}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			o.put(string(kv.Key), kv.Value, kv.Lease, kv.CreateRevision, kv.ModRevision)
		}
	}
	rev := resp.Header.Revision
	watch := func(prefix string) {
		for wr := range cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if err := wr.Err(); err != nil {
				o.mu.Lock()
				o.err = err
				o.mu.Unlock()
				return
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					o.mu.Lock()
					delete(o.members, strings.TrimPrefix(string(ev.Kv.Key), s.Members()))
					delete(o.ranges, string(ev.Kv.Key))
					o.mu.Unlock()
					continue
				}
				o.put(string(ev.Kv.Key), ev.Kv.Value, ev.Kv.Lease, ev.Kv.CreateRevision, ev.Kv.ModRevision)
			}
		}
	}
	go watch(s.Members())
	go watch(s.Ranges())
	return o, nil
}

// put records one registration or range record as rangesNow would read it.
func (o *rangeObserver) put(key string, value []byte, lease, created, modified int64) {
	g := groupOf(o.g)
	o.mu.Lock()
	defer o.mu.Unlock()
	if strings.HasPrefix(key, o.g.Members()) {
		delete(o.members, strings.TrimPrefix(key, o.g.Members()))
		if m, err := schema.DecodeMember(g, key, value); err == nil && lease != 0 {
			o.members[m.ID] = schema.Member{MemberInfo: m, CreateRev: created}
		}
		return
	}
	delete(o.ranges, key)
	if rec, err := schema.DecodeRange(g, key, value, modified); err == nil {
		o.ranges[key] = schema.RangeState{Key: key, Record: rec, Rev: modified}
	}
}

// snapshot is the registrations and range records as last seen (a
// Snapshot with those only, in no particular order), or an empty one once
// the watch has failed, so that no check passes on stale state.
func (o *rangeObserver) snapshot() *schema.Snapshot {
	o.mu.Lock()
	defer o.mu.Unlock()
	snap := &schema.Snapshot{Members: make(map[string]schema.Member, len(o.members))}
	if o.err != nil {
		return snap
	}
	for id, m := range o.members {
		snap.Members[id] = m
	}
	for _, r := range o.ranges {
		snap.Ranges = append(snap.Ranges, r)
	}
	return snap
}
