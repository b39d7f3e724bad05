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

// DefaultMaxTxnOps is etcd's default limit on the operations (and on the
// compares) of one transaction (the server's --max-txn-ops).
const DefaultMaxTxnOps = 128

// ErrFenced is matched (errors.Is) by a *FencedError.
var ErrFenced = errors.New("coord: fenced")

// FencedError names the ranges (their range keys, RangeState.Key) whose
// ownership guard failed: the writer no longer owns them and must stop
// working on them. Ranges not named here were written.
type FencedError struct {
	Keys []string
	// Session is true when the common guard failed (the writer's session or
	// membership is gone): every write was refused.
	Session bool
}

func (e *FencedError) Error() string {
	if e.Session {
		return fmt.Sprintf("coord: fenced: the writer's session guard failed; %d range(s) not written", len(e.Keys))
	}
	return "coord: fenced on " + strings.Join(e.Keys, ", ")
}

func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// LossReport says that a range lost the records in Loss (Kafka deleted them
// before the range handled them), noticed at At. It is written with the
// ledger entry that moves the range past them.
type LossReport struct {
	Loss ledger.Loss
	At   time.Time
}

// RangeFlush is one owned range's ledger entry to write.
type RangeFlush struct {
	Range   RangeState   // the range as assigned (its Rev is the guard)
	Entry   ledger.Entry // its completion state
	Encoded []byte       // ledger.Encode(Entry), if the caller already has it
	Losses  []LossReport // loss reports not yet written, written with the entry
}

// Flush writes the ledger entries of ranges the member owns, each guarded by
// the member's session and by its ownership of the range as it was assigned,
// in as few transactions as etcd's operation limit (Config.MaxTxnOps)
// allows. A range's loss reports are written in the same transaction as its
// entry. The result is a *FencedError naming the ranges that were fenced;
// the others are written.
//
// Flush is safe to retry after an error such as a timeout, even if the
// transaction did apply: guards compare ownership, not the ledger key's own
// revision, so writing the same entries again leaves the same state.
func (s *Session) Flush(ctx context.Context, flushes []RangeFlush) error {
	writes := make([]write, 0, len(flushes))
	for _, f := range flushes {
		w := write{Key: f.Range.LedgerKey, Name: f.Range.Key, Entry: f.Entry, Value: f.Encoded, Guard: s.guard(f.Range)}
		for _, l := range f.Losses {
			w.Also = append(w.Also, s.lossOp(f.Range, l))
		}
		writes = append(writes, w)
	}
	return s.rec.record(ctx, s.common(), writes)
}

// Release acknowledges a revoked range: it writes the range's final ledger
// entry, its loss reports not yet written, and marks the range released, in
// one fenced transaction. The leader then hands the range to its next owner.
// A *FencedError means the range is no longer this member's to release.
func (s *Session) Release(ctx context.Context, r RangeState, final ledger.Entry, losses []LossReport) error {
	rec := r.Record
	rec.State, rec.Since = StateReleased, time.Now().UTC()
	also := []clientv3.Op{clientv3.OpPut(r.Key, mustJSON(rec))}
	for _, l := range losses {
		also = append(also, s.lossOp(r, l))
	}
	err := s.rec.record(ctx, s.common(), []write{{
		Key:   r.LedgerKey,
		Name:  r.Key,
		Entry: final,
		Guard: s.guard(r),
		Also:  also,
	}})
	if err == nil {
		s.log.Info("range released", "topic", rec.Topic, "partition", rec.Partition, "range", rec.Range().String(), "to", rec.Target)
	}
	return err
}

// LossKey is the etcd key under which range r's report of records lost
// below logStart is written (for log messages).
func (s *Session) LossKey(r RangeState, logStart int64) string {
	return s.schema.LostRange(r.Record.Topic, r.Record.Partition, r.Record.Lo, logStart)
}

// common is the guard every write of this member carries: its registration,
// which exists only while its session does.
func (s *Session) common() []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.memberKey), "=", s.memberRev)}
}

// guard is the compare that holds only while this member owns r as it was
// assigned: any reassignment, split or handoff by the leader rewrites the
// range record and fails it.
func (s *Session) guard(r RangeState) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.Rev)}
}

// lossOp is the write of the report that range r lost the records in l. It
// belongs in the transaction of the ledger write that truncates the range,
// so that the report and the ledger move together or not at all.
func (s *Session) lossOp(r RangeState, l LossReport) clientv3.Op {
	rec := LossRecord{V: recordVersion, Member: s.ID(), Topic: r.Record.Topic, Partition: r.Record.Partition,
		Lo: r.Record.Lo, Hi: r.Record.Hi, At: l.At, Loss: l.Loss}
	return clientv3.OpPut(s.LossKey(r, l.Loss.LogStart), mustJSON(rec))
}

// write is one range's entry to record.
type write struct {
	Key   string         // the ledger key of the range
	Name  string         // what a FencedError calls it (the range key); Key if empty
	Entry ledger.Entry   // its state
	Value []byte         // ledger.Encode(Entry), if the caller already has it
	Guard []clientv3.Cmp // compares that hold only while the writer owns the range
	Also  []clientv3.Op  // more operations to apply atomically with this write
}

func (w write) name() string {
	if w.Name != "" {
		return w.Name
	}
	return w.Key
}

// recorder writes ledger entries to etcd, each under its owner's guard.
type recorder struct {
	cli       *clientv3.Client
	maxTxnOps int
}

// newRecorder returns a recorder. maxTxnOps is the server's --max-txn-ops
// (0 means DefaultMaxTxnOps).
func newRecorder(cli *clientv3.Client, maxTxnOps int) *recorder {
	if maxTxnOps <= 0 {
		maxTxnOps = DefaultMaxTxnOps
	}
	return &recorder{cli: cli, maxTxnOps: maxTxnOps}
}

// record writes all entries in as few transactions as etcd's operation limit
// allows (one, for a member with few ranges). Each transaction holds the
// common guard and the guards of its writes. If a transaction's guard fails,
// its writes are retried one by one to find which ranges are fenced; the
// others are written. The result is a *FencedError naming the fenced ranges.
func (r *recorder) record(ctx context.Context, common []clientv3.Cmp, writes []write) error {
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
func (r *recorder) chunk(common []clientv3.Cmp, writes []write) int {
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

func (r *recorder) txn(ctx context.Context, common []clientv3.Cmp, writes []write) (bool, error) {
	cmps := append([]clientv3.Cmp(nil), common...)
	var ops []clientv3.Op
	for _, w := range writes {
		cmps = append(cmps, w.Guard...)
		val := w.Value
		if val == nil {
			val = ledger.Encode(w.Entry)
		}
		ops = append(ops, clientv3.OpPut(w.Key, string(val)))
		ops = append(ops, w.Also...)
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("coord: write %d ledger entries: %w", len(writes), err)
	}
	return resp.Succeeded, nil
}

// one writes each entry in its own transaction, collecting the fenced ones.
func (r *recorder) one(ctx context.Context, common []clientv3.Cmp, writes []write, fenced *FencedError) error {
	if len(common) > 0 {
		resp, err := r.cli.Txn(ctx).If(common...).Commit()
		if err != nil {
			return fmt.Errorf("coord: check writer guard: %w", err)
		}
		if !resp.Succeeded {
			fenced.Session = true
			for _, w := range writes {
				fenced.Keys = append(fenced.Keys, w.name())
			}
			return nil
		}
	}
	for _, w := range writes {
		ok, err := r.txn(ctx, common, []write{w})
		if err != nil {
			return err
		}
		if !ok {
			fenced.Keys = append(fenced.Keys, w.name())
		}
	}
	return nil
}
