package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultMaxTxnOps is etcd's default limit on the operations (and on the
// compares) of one transaction (the server's --max-txn-ops).
const DefaultMaxTxnOps = 128

// ErrFenced is matched (errors.Is) by a *FencedError.
var ErrFenced = errors.New("ledger: fenced")

// FencedError names the ledger keys whose guard failed: the writer no longer
// owns those ranges and must stop working on them. Writes not named here were
// applied.
type FencedError struct {
	Keys []string
	// Session is true when the common guard failed (the writer's session or
	// membership is gone): every write was refused.
	Session bool
}

func (e *FencedError) Error() string {
	if e.Session {
		return fmt.Sprintf("ledger: fenced: the writer's session guard failed; %d range(s) not written", len(e.Keys))
	}
	return "ledger: fenced on " + strings.Join(e.Keys, ", ")
}

func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Write is one range's entry to record.
type Write struct {
	Key   string         // the ledger key of the range
	Entry Entry          // its state
	Value []byte         // Encode(Entry), if the caller already has it
	Guard []clientv3.Cmp // compares that hold only while the writer owns the range
	Also  []clientv3.Op  // more operations to apply atomically with this write
}

// Recorder writes ledger entries to etcd, each under its owner's guard.
type Recorder struct {
	cli       *clientv3.Client
	maxTxnOps int
}

// NewRecorder returns a recorder. maxTxnOps is the server's --max-txn-ops
// (0 means DefaultMaxTxnOps).
func NewRecorder(cli *clientv3.Client, maxTxnOps int) *Recorder {
	if maxTxnOps <= 0 {
		maxTxnOps = DefaultMaxTxnOps
	}
	return &Recorder{cli: cli, maxTxnOps: maxTxnOps}
}

// Record writes all entries in as few transactions as etcd's operation limit
// allows (one, for a member with few ranges). Each transaction holds the
// common guard and the guards of its writes. If a transaction's guard fails,
// its writes are retried one by one to find which ranges are fenced; the
// others are written. The result is a *FencedError naming the fenced keys.
//
// Record is safe to retry after an error such as a timeout, even if the
// transaction did apply: guards compare ownership, not the ledger key's own
// revision, so writing the same entries again leaves the same state.
func (r *Recorder) Record(ctx context.Context, common []clientv3.Cmp, writes []Write) error {
	var fenced FencedError
	for len(writes) > 0 {
		n := r.chunk(common, writes)
		ok, err := r.txn(ctx, common, writes[:n])
		if err != nil {
			return err
		}
		if !ok {
			if err := r.one(ctx, common, writes[:n], &fenced); err != nil {
				return err
			}
		}
		writes = writes[n:]
	}
	if len(fenced.Keys) > 0 {
		return &fenced
	}
	return nil
}

// chunk returns how many of writes fit in one transaction.
func (r *Recorder) chunk(common []clientv3.Cmp, writes []Write) int {
	cmps, ops := len(common), 0
	for i, w := range writes {
		cmps += len(w.Guard)
		ops += 1 + len(w.Also)
		if i > 0 && (cmps > r.maxTxnOps || ops > r.maxTxnOps) {
			return i
		}
	}
	return len(writes)
}

func (r *Recorder) txn(ctx context.Context, common []clientv3.Cmp, writes []Write) (bool, error) {
	cmps := append([]clientv3.Cmp(nil), common...)
	var ops []clientv3.Op
	for _, w := range writes {
		cmps = append(cmps, w.Guard...)
		val := w.Value
		if val == nil {
			val = Encode(w.Entry)
		}
		ops = append(ops, clientv3.OpPut(w.Key, string(val)))
		ops = append(ops, w.Also...)
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("ledger: write %d entries: %w", len(writes), err)
	}
	return resp.Succeeded, nil
}

// one writes each entry in its own transaction, collecting the fenced keys.
func (r *Recorder) one(ctx context.Context, common []clientv3.Cmp, writes []Write, fenced *FencedError) error {
	if len(common) > 0 {
		resp, err := r.cli.Txn(ctx).If(common...).Commit()
		if err != nil {
			return fmt.Errorf("ledger: check writer guard: %w", err)
		}
		if !resp.Succeeded {
			fenced.Session = true
			for _, w := range writes {
				fenced.Keys = append(fenced.Keys, w.Key)
			}
			return nil
		}
	}
	for _, w := range writes {
		ok, err := r.txn(ctx, common, []Write{w})
		if err != nil {
			return err
		}
		if !ok {
			fenced.Keys = append(fenced.Keys, w.Key)
		}
	}
	return nil
}
