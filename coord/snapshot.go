package coord

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// ReadSnapshot reads the group's state in one transaction.
func ReadSnapshot(ctx context.Context, cli *clientv3.Client, g schema.Group) (*schema.Snapshot, error) {
	s := schemaOf(g)
	resp, err := cli.Txn(ctx).Then(snapshotOps(s)...).Commit()
	if err != nil {
		return nil, fmt.Errorf("coord: read group state under %s: %w", s.Root(), err)
	}
	return snapshotOf(s, resp), nil
}

// snapshotOps are ReadSnapshot's reads, in groupKVs order.
func snapshotOps(s schema.Keys) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(s.Members(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Ranges(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Ledger(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Commits(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Generation()),
		clientv3.OpGet(s.Stuck(), clientv3.WithPrefix()),
		clientv3.OpGet(s.Lost(), clientv3.WithPrefix()),
	}
}

// snapshotOf decodes the first len(groupKVs) responses of a transaction
// made of snapshotOps.
func snapshotOf(s schema.Keys, resp *clientv3.TxnResponse) *schema.Snapshot {
	var kvs groupKVs
	for i := range kvs {
		kvs[i] = resp.Responses[i].GetResponseRange().Kvs
	}
	return buildSnapshot(s, resp.Header.Revision, kvs)
}

// GroupView is everything an operator's view of the group needs from etcd:
// the snapshot, the current leader, the pause state and the operations set
// on keys.
type GroupView struct {
	*schema.Snapshot
	Leader string // the member that leads, "" if none
	Pause  PauseState
	KeyOps []KeyOp // in key order
}

// ReadGroupView reads the group's snapshot, leader and pause state in one
// transaction (keyshare status: one etcd read whatever the group's size).
func ReadGroupView(ctx context.Context, cli *clientv3.Client, g schema.Group) (*GroupView, error) {
	s := schemaOf(g)
	ops := append(snapshotOps(s),
		clientv3.OpGet(s.Election()+"/", clientv3.WithFirstCreate()...),
		clientv3.OpGet(s.Paused()),
		clientv3.OpGet(s.KeyOps(), clientv3.WithPrefix()),
	)
	resp, err := cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, fmt.Errorf("coord: read group state under %s: %w", s.Root(), err)
	}
	v := &GroupView{Snapshot: snapshotOf(s, resp)}
	n := len(groupKVs{})
	if kvs := resp.Responses[n].GetResponseRange().Kvs; len(kvs) > 0 {
		if kvs[0].Lease == 0 {
			v.Problems = append(v.Problems, &schema.BadValueError{Key: string(kvs[0].Key),
				Problem: "election key without a lease: no session keeps it, so no member can lead while it stands; a campaigning member deletes it (or: etcdctl del <key>)"})
		} else {
			v.Leader = string(kvs[0].Value)
		}
	}
	if kvs := resp.Responses[n+1].GetResponseRange().Kvs; len(kvs) > 0 {
		v.Pause = pauseState(kvs[0])
	}
	for _, kv := range resp.Responses[n+2].GetResponseRange().Kvs {
		v.KeyOps = append(v.KeyOps, keyOpOf(g, kv))
	}
	return v, nil
}
