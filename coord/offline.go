package coord

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Writes an administrator makes (package admin). Each is guarded in the
// same transaction by "no key under members/", so a member that joins
// meanwhile makes the write fail rather than run beside it; an offset reset
// may instead be guarded by the group's pause (ResetGuard), beside members
// that hold their ranges but take no records.

// maxResetOps keeps each reset transaction under etcd's default limit of
// 128 operations.
const maxResetOps = 100

// LiveMembers lists the ids of group g's registered members.
func LiveMembers(ctx context.Context, cli *clientv3.Client, g schema.Group) ([]string, error) {
	s := schemaOf(g)
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
func CountKeys(ctx context.Context, cli *clientv3.Client, g schema.Group) (int64, error) {
	resp, err := cli.Get(ctx, g.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("coord: read %s: %w", g.Root(), err)
	}
	return resp.Count, nil
}

// noMembers holds while group s has no registered member.
func noMembers(g schema.Group) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(schemaOf(g).Members()), "=", 0).WithPrefix()
}

// DeleteGroup deletes every key of group g in one transaction, refused
// (ErrGroupChanged) if a member is registered.
func DeleteGroup(ctx context.Context, cli *clientv3.Client, g schema.Group) error {
	resp, err := cli.Txn(ctx).If(noMembers(g)).Then(clientv3.OpDelete(g.Root(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("coord: delete %s: %w", g.Root(), err)
	}
	if !resp.Succeeded {
		return ErrGroupChanged
	}
	return nil
}

// OffsetReset moves one partition of the group to Offset.
type OffsetReset struct {
	assign.TopicPartition
	Offset int64
}

// ResetGuard says what must still hold when a reset is written, besides
// every range record and ledger entry it rewrites being as the snapshot
// read them.
type ResetGuard struct {
	// PausedRev is the ModRevision of the group's paused key as read
	// (PauseState.Rev, from ReadPause). When it is not 0 the reset is written beside live
	// members, as long as the pause still stands unchanged; when it is 0
	// no member may be registered.
	PausedRev int64
}

func (rg ResetGuard) cmp(g schema.Group) clientv3.Cmp {
	if rg.PausedRev != 0 {
		return clientv3.Compare(clientv3.ModRevision(schemaOf(g).Paused()), "=", rg.PausedRev)
	}
	return noMembers(g)
}

// ResetOffsets writes, for each reset, the partition's recorded commit
// (written by "by", at "at"), a fresh ledger entry (next = Offset) for
// every range of the partition in snap, and the range's record again, as
// it is but with Reset set to snap.Rev (which grows with every reset: each
// reads its snapshot after the last one was written), so that the next
// member, or the range's running owner, starts there.
//
// Rewriting the range record is what makes the reset safe beside a paused
// owner: the owner's ledger writes are guarded by the record's
// ModRevision, so a flush of the state it held before the reset is fenced,
// and the grown Reset tells it to drop that state and load the new entry
// (consumer's range table).
//
// Each partition is written whole in one transaction; partitions go in
// transactions of at most 100 operations, each guarded by rg and by every
// range record and ledger entry it rewrites being as snap read them. A
// failed guard is ErrGroupChanged, and the transactions before it stay
// applied (read a new snapshot and apply the same resets again).
func ResetOffsets(ctx context.Context, cli *clientv3.Client, g schema.Group, snap *schema.Snapshot, resets []OffsetReset, rg ResetGuard, by string, at time.Time) error {
	s := schemaOf(g)
	byTP := snap.Partitions()
	for _, r := range resets {
		if n := len(byTP[r.TopicPartition]); 2*n+1 > maxResetOps {
			return fmt.Errorf("coord: %s/%d has %d ranges; a reset writes a partition in one transaction of at most %d operations (%d ranges): nothing was written",
				r.Topic, r.Partition, n, maxResetOps, (maxResetOps-1)/2)
		}
	}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		resp, err := cli.Txn(ctx).If(append(cmps, rg.cmp(g))...).Then(ops...).Commit()
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
		rec := schema.CommitRecord{V: recordVersion, Offset: r.Offset, Leader: by, At: at, Reset: snap.Rev}
		add := []clientv3.Op{clientv3.OpPut(s.Commit(r.Topic, r.Partition), mustJSON(rec))}
		var guard []clientv3.Cmp
		for _, rs := range byTP[r.TopicPartition] {
			e := ledger.Entry{Segments: []ledger.Segment{{Lo: rs.Record.Lo, Hi: rs.Record.Hi, Next: r.Offset}}}
			rr := rs.Record
			rr.Reset = snap.Rev
			add = append(add,
				clientv3.OpPut(rs.LedgerKey, string(ledger.Encode(e))),
				clientv3.OpPut(rs.Key, mustJSON(rr)))
			guard = append(guard,
				clientv3.Compare(clientv3.ModRevision(rs.Key), "=", rs.Rev),
				clientv3.Compare(clientv3.ModRevision(rs.LedgerKey), "=", rs.EntryRev))
		}
		if len(ops)+len(add) > maxResetOps || len(cmps)+len(guard)+1 > maxResetOps {
			if err := flush(); err != nil {
				return err
			}
		}
		ops, cmps = append(ops, add...), append(cmps, guard...)
	}
	return flush()
}
