package coord

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/ledger"
)

// Writes an administrator makes while no member runs (package admin). Each
// is guarded by "no key under members/" in the same transaction, so a
// member that joins meanwhile makes the write fail rather than run beside
// it.

// ErrGroupChanged: an administrator's write was refused because a member
// registered, or the state it was planned on changed, since it was read.
// Nothing of the refused transaction was applied.
var ErrGroupChanged = errors.New("coord: the group changed while it was written")

// maxResetOps keeps each reset transaction under etcd's default limit of
// 128 operations.
const maxResetOps = 100

// LiveMembers lists the ids of group g's registered members.
func LiveMembers(ctx context.Context, cli *clientv3.Client, g Group) ([]string, error) {
	s := g.schema()
	resp, err := cli.Get(ctx, s.Members(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("coord: read members of %s: %w", g.Name, err)
	}
	var ids []string
	for _, kv := range resp.Kvs {
		ids = append(ids, strings.TrimPrefix(string(kv.Key), s.Members()))
	}
	return ids, nil
}

// CountKeys counts the keys stored under group g's root.
func CountKeys(ctx context.Context, cli *clientv3.Client, g Group) (int64, error) {
	resp, err := cli.Get(ctx, g.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("coord: read %s: %w", g.Root(), err)
	}
	return resp.Count, nil
}

// noMembers holds while group s has no registered member.
func noMembers(g Group) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(g.schema().Members()), "=", 0).WithPrefix()
}

// DeleteGroup deletes every key of group g in one transaction, refused
// (ErrGroupChanged) if a member is registered.
func DeleteGroup(ctx context.Context, cli *clientv3.Client, g Group) error {
	resp, err := cli.Txn(ctx).If(noMembers(g)).Then(clientv3.OpDelete(g.Root(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("coord: delete %s: %w", g.Root(), err)
	}
	if !resp.Succeeded {
		return ErrGroupChanged
	}
	return nil
}

// OffsetReset moves one partition of a stopped group to Offset.
type OffsetReset struct {
	TopicPartition
	Offset int64
}

// ResetOffsets writes, for each reset, the partition's recorded commit
// (written by "by", at "at") and a fresh ledger entry (next = Offset) for
// every range of the partition in snap, so that the next member starts
// there. The writes go in transactions of at most 100 operations, each
// guarded by "no member registered" and by every ledger key it writes
// being as snap read it; a failed guard is ErrGroupChanged, and the
// transactions before it stay applied (apply the same resets again).
func ResetOffsets(ctx context.Context, cli *clientv3.Client, g Group, snap *Snapshot, resets []OffsetReset, by string, at time.Time) error {
	s := g.schema()
	byTP := snap.Partitions()
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		resp, err := cli.Txn(ctx).If(append(cmps, noMembers(g))...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("coord: write the reset to etcd: %w", err)
		}
		if !resp.Succeeded {
			return ErrGroupChanged
		}
		cmps, ops = nil, nil
		return nil
	}
	for _, r := range resets {
		rec := CommitRecord{V: recordVersion, Offset: r.Offset, Leader: by, At: at}
		add := []clientv3.Op{clientv3.OpPut(s.Commit(r.Topic, r.Partition), mustJSON(rec))}
		var guard []clientv3.Cmp
		for _, rs := range byTP[r.TopicPartition] {
			e := ledger.Entry{Segments: []ledger.Segment{{Lo: rs.Record.Lo, Hi: rs.Record.Hi, Next: r.Offset}}}
			add = append(add, clientv3.OpPut(rs.LedgerKey, string(ledger.Encode(e))))
			guard = append(guard, clientv3.Compare(clientv3.ModRevision(rs.LedgerKey), "=", rs.EntryRev))
		}
		if len(ops)+len(add) > maxResetOps {
			if err := flush(); err != nil {
				return err
			}
		}
		ops, cmps = append(ops, add...), append(cmps, guard...)
	}
	return flush()
}
