package coord

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/schema"
)

// Writing an assignment round: the leader's planned changes cut into
// transactions within etcd's limits, each guarded by leadership, sent a few
// at a time. A transaction whose compares fail (an owner wrote meanwhile)
// is split in halves until the conflicting changes are found; those wait
// for the next round, the rest are written.

// maxTxnBytes bounds the size of one assignment transaction, below etcd's
// default request limit (--max-request-bytes, 1.5 MiB), so that a group
// whose changes would exceed it (large ledger entries moving) is written in
// several transactions.
const maxTxnBytes = 1 << 20

// opBytes is roughly the request size of an op: its key and value.
func opBytes(op clientv3.Op) int { return len(op.KeyBytes()) + len(op.ValueBytes()) + 16 }

func changeBytes(c plan.Change) int {
	n := 0
	for _, w := range c.Writes {
		n += len(w.Key) + len(w.Value) + 16 // as opBytes counts the op
	}
	return n + 32*len(c.Guards)
}

// txnOf turns the planner's guards and writes into etcd's compares and ops:
// the one place the plan becomes etcd requests.
func txnOf(c plan.Change) ([]clientv3.Cmp, []clientv3.Op) {
	cmps := make([]clientv3.Cmp, 0, len(c.Guards))
	for _, g := range c.Guards {
		target := clientv3.ModRevision(g.Key)
		if g.Created {
			target = clientv3.CreateRevision(g.Key)
		}
		cmps = append(cmps, clientv3.Compare(target, "=", g.Rev))
	}
	ops := make([]clientv3.Op, 0, len(c.Writes))
	for _, w := range c.Writes {
		switch {
		case w.Delete:
			ops = append(ops, clientv3.OpDelete(w.Key))
		case w.Lease != 0:
			ops = append(ops, clientv3.OpPut(w.Key, w.Value, clientv3.WithLease(clientv3.LeaseID(w.Lease))))
		default:
			ops = append(ops, clientv3.OpPut(w.Key, w.Value))
		}
	}
	return cmps, ops
}

// apply writes the changes in as few transactions as etcd's limits allow
// (MaxTxnOps operations, maxTxnBytes bytes), each guarded by leadership, up
// to recordInFlight at once: the changes of one round are independent
// (each is guarded by what it read), and a leave at P = 4,096 hands off
// 2,048 ranges in 17 transactions. A change whose compares fail (an owner
// wrote meanwhile) is left for the next round: retry says so. rev is the
// revision of the last write.
func (s *Session) apply(ctx context.Context, l *leader, gen int64, changes []plan.Change) (retry bool, rev int64, err error) {
	genOp := clientv3.OpPut(s.schema.Generation(), mustJSON(schema.GenerationRecord{V: recordVersion, Generation: gen, Leader: s.ID(), At: time.Now().UTC()}))
	var mu sync.Mutex
	eachInFlight(s.txnBatches(genOp, changes), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return err != nil
	}, func(_ int, batch []plan.Change) {
		again, wrote, berr := s.applyOne(ctx, l, genOp, gen, batch)
		mu.Lock()
		defer mu.Unlock()
		retry, rev = retry || again, max(rev, wrote)
		if berr != nil && err == nil {
			err = berr
		}
	})
	return retry, rev, err
}

// txnBatches cuts changes into transactions within etcd's limits, each
// with room for the leadership guard and the generation write.
func (s *Session) txnBatches(genOp clientv3.Op, changes []plan.Change) [][]plan.Change {
	var out [][]plan.Change
	limit := s.cfg.MaxTxnOps
	for len(changes) > 0 {
		n, cmps, ops, size := 0, 1, 1, opBytes(genOp)
		for n < len(changes) {
			c := changes[n]
			b := changeBytes(c)
			if n > 0 && (cmps+len(c.Guards) > limit || ops+len(c.Writes) > limit || size+b > maxTxnBytes) {
				break
			}
			if n == 0 && size+b > maxTxnBytes {
				s.log.Error("an assignment change is larger than etcd's default request limit (1.5 MiB); writing it alone, etcd refuses it unless its --max-request-bytes is raised", "bytes", size+b, "change", c.What)
			}
			cmps, ops, size = cmps+len(c.Guards), ops+len(c.Writes), size+b
			n++
		}
		out = append(out, changes[:n])
		changes = changes[n:]
	}
	return out
}

// applyOne writes one transaction's batch. If some owner wrote meanwhile,
// the rest is written without the conflicting changes, which wait for the
// next round (retry). An error other than ErrNotLeader (etcd unreachable,
// or a transaction it refused: a change over its limits would be refused
// every round) is logged and left for the next round too.
func (s *Session) applyOne(ctx context.Context, l *leader, genOp clientv3.Op, gen int64, batch []plan.Change) (retry bool, rev int64, err error) {
	ok, rev, err := s.applyBatch(ctx, l, genOp, gen, batch)
	switch {
	case errors.Is(err, ErrNotLeader):
		return false, rev, err
	case err != nil:
		if ctx.Err() != nil {
			return false, rev, ctx.Err()
		}
		s.log.Warn("assignment not written; trying again next round", "generation", gen, "error", err, "changes", whats(batch))
		return true, rev, nil
	case ok:
		return false, rev, nil
	}
	rev, err = s.applyHalves(ctx, l, genOp, gen, batch)
	return true, rev, err
}

// applyHalves writes a batch whose transaction failed on some change's
// compares: each half is tried, and a half that fails is split again, so k
// conflicting changes among n cost about 3·k·log2(n) transactions, not n
// (a leave of thousands of ranges meets a few owners' flushes).
func (s *Session) applyHalves(ctx context.Context, l *leader, genOp clientv3.Op, gen int64, batch []plan.Change) (rev int64, err error) {
	if len(batch) <= 1 {
		return 0, nil // the conflicting change: the next round plans it again
	}
	mid := len(batch) / 2
	for _, half := range [][]plan.Change{batch[:mid], batch[mid:]} {
		ok, wrote, err := s.applyBatch(ctx, l, genOp, gen, half)
		switch {
		case errors.Is(err, ErrNotLeader):
			return rev, err
		case err != nil:
			s.log.Warn("assignment changes not written; trying again next round", "generation", gen, "error", err, "changes", whats(half))
		case ok:
			rev = max(rev, wrote)
		default:
			wrote, err := s.applyHalves(ctx, l, genOp, gen, half)
			rev = max(rev, wrote)
			if err != nil {
				return rev, err
			}
		}
	}
	return rev, nil
}

// whats describes a batch of changes for a log line: the first few, and how
// many more.
func whats(batch []plan.Change) string {
	return textsafe.FirstFew(batch, "; ", func(c plan.Change) string { return c.What })
}

// applyBatch writes changes in one transaction. It returns false if a compare
// failed while this member still leads, and ErrNotLeader if it does not.
//
// A large batch is logged as one line (its first changes and a count), not
// one line per change: a group of thousands of partitions would flood.
func (s *Session) applyBatch(ctx context.Context, l *leader, genOp clientv3.Op, gen int64, batch []plan.Change) (bool, int64, error) {
	cmps, ops := []clientv3.Cmp{l.guard()}, []clientv3.Op{genOp}
	for _, c := range batch {
		cc, co := txnOf(c)
		cmps, ops = append(cmps, cc...), append(ops, co...)
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, 0, err
	}
	if resp.Succeeded {
		if len(batch) <= 8 {
			for _, c := range batch {
				s.log.Info("assignment", "generation", gen, "change", c.What)
			}
		} else {
			s.log.Info("assignment", "generation", gen, "changes", len(batch), "first", whats(batch))
		}
		return true, resp.Header.Revision, nil
	}
	lr, err := s.cli.Txn(ctx).If(l.guard()).Commit()
	if err != nil {
		return false, 0, err
	}
	if !lr.Succeeded {
		return false, 0, ErrNotLeader
	}
	return false, 0, nil
}
