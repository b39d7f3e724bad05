package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// DefaultMaxTxnOps is etcd's default limit on the operations (and on the
// compares) of one transaction (the server's --max-txn-ops).
const DefaultMaxTxnOps = 128

// LossReport says that a range lost the records in Loss (Kafka deleted them
// before the range handled them), noticed at At. It is written with the
// ledger entry that moves the range past them.
type LossReport struct {
	Loss ledger.Loss
	At   time.Time
}

// RangeFlush is one owned range's ledger entry to write.
type RangeFlush struct {
	Range   schema.RangeState // the range as assigned (its Rev is the guard)
	Entry   ledger.Entry      // its completion state
	Encoded []byte            // ledger.Encode(Entry), if the caller already has it
	Losses  []LossReport      // loss reports not yet written, written with the entry
}

// Flush writes the ledger entries of ranges the member owns, each guarded by
// the member's session and by its ownership of the range as it was assigned,
// in as few transactions as etcd's operation limit (Config.MaxTxnOps)
// allows, each at most about 1 MiB. A range's loss reports are written in
// the same transaction as its entry. The result names the ranges not
// written: a *FencedError for those fenced, a *TooLargeError (joined to it)
// for any entry etcd refused for its size; the others are written.
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

// LossKey is the etcd key under which range r's report of records lost
// below logStart is written (for log messages).
func (s *Session) LossKey(r schema.RangeState, logStart int64) string {
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
func (s *Session) guard(r schema.RangeState) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(r.Key), "=", r.Rev)}
}

// lossOp is the write of the report that range r lost the records in l. It
// belongs in the transaction of the ledger write that truncates the range,
// so that the report and the ledger move together or not at all.
func (s *Session) lossOp(r schema.RangeState, l LossReport) clientv3.Op {
	rec := schema.LossRecord{V: recordVersion, Member: s.ID(), Topic: r.Record.Topic, Partition: r.Record.Partition,
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
	// KeepEntry writes only Also, under Guard: etcd already holds Entry
	// (a release of a range whose state has not changed since its last
	// flush rewrites only the range record).
	KeepEntry bool
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
	maxBytes  int // of keys and values in one transaction
}

// newRecorder returns a recorder. maxTxnOps is the server's --max-txn-ops
// (0 means DefaultMaxTxnOps).
func newRecorder(cli *clientv3.Client, maxTxnOps int) *recorder {
	if maxTxnOps <= 0 {
		maxTxnOps = DefaultMaxTxnOps
	}
	return &recorder{cli: cli, maxTxnOps: maxTxnOps, maxBytes: maxTxnBytes}
}

// record writes all entries in as few transactions as etcd's limits allow
// (one, for a member with few ranges): at most maxTxnOps compares and
// operations and about maxBytes of keys and values each; the first alone,
// then up to recordInFlight at once. Each transaction holds the common guard
// and the guards of its writes. When a transaction's guard fails, the same
// transaction has read the guarded keys (its Else branch), so the fenced
// writes are known at once and the others are written in one more
// transaction. The result is a *FencedError naming the fenced ranges (in
// the order of writes); all other writes are made. On any other error some
// transactions may have been written, as when one times out.
func (r *recorder) record(ctx context.Context, common []clientv3.Cmp, writes []write) error {
	for i := range writes {
		if writes[i].Value == nil && !writes[i].KeepEntry {
			writes[i].Value = ledger.Encode(writes[i].Entry)
		}
	}
	var chunks [][]write
	for rest := writes; len(rest) > 0; {
		n := r.chunk(common, rest)
		chunks = append(chunks, rest[:n])
		rest = rest[n:]
	}
	rr := &recordRun{r: r, common: common, out: make([]chunkOutcome, len(chunks))}
	if len(chunks) > 0 {
		// The first alone: if it finds the session gone, no other
		// transaction is tried.
		rr.send(ctx, 0, chunks[0])
		eachInFlight(chunks[1:], rr.failedYet, func(i int, c []write) { rr.send(ctx, i+1, c) })
	}
	return mergeOutcomes(chunks, rr.out)
}

// chunkOutcome is the outcome of one transaction of a record.
type chunkOutcome struct {
	fenced   FencedError
	tooLarge bool
	err      error
}

// recordRun is one record's transactions, sent concurrently.
type recordRun struct {
	r      *recorder
	common []clientv3.Cmp
	out    []chunkOutcome // by chunk, merged in order at the end
	mu     sync.Mutex
	// session is set once a chunk found the common guard failed.
	session bool
	// failed is the first error of a chunk that failed otherwise.
	failed error
}

func (rr *recordRun) failedYet() bool {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return rr.failed != nil
}

// send writes chunk i, c, in one transaction; once a chunk has found the
// common guard failed, it fences c's writes without a request.
func (rr *recordRun) send(ctx context.Context, i int, c []write) {
	o := &rr.out[i]
	rr.mu.Lock()
	fencedAll := rr.session
	rr.mu.Unlock()
	if fencedAll {
		// Every later write carries the same failed guard.
		for _, w := range c {
			o.fenced.Keys = append(o.fenced.Keys, w.name())
		}
		return
	}
	err := rr.r.batch(ctx, rr.common, c, &o.fenced)
	if err != nil && len(c) == 1 && requestTooLarge(err) {
		// One entry larger than etcd takes: the others must not
		// wait behind it forever.
		o.tooLarge, err = true, nil
	}
	o.err = err
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if err != nil && rr.failed == nil {
		rr.failed = err
	}
	rr.session = rr.session || o.fenced.Session
}

// mergeOutcomes is the error of the first chunk that failed, if any; else
// the fenced writes and the entries too large for etcd, in the order of
// writes.
func mergeOutcomes(chunks [][]write, out []chunkOutcome) error {
	var fenced FencedError
	var tooLarge TooLargeError
	for i, o := range out {
		if o.err != nil {
			return o.err
		}
		if o.tooLarge {
			tooLarge.Keys = append(tooLarge.Keys, chunks[i][0].name())
			tooLarge.Bytes = append(tooLarge.Bytes, chunks[i][0].size())
		}
		fenced.Keys = append(fenced.Keys, o.fenced.Keys...)
		fenced.Session = fenced.Session || o.fenced.Session
	}
	var errs []error
	if len(fenced.Keys) > 0 {
		errs = append(errs, &fenced)
	}
	if len(tooLarge.Keys) > 0 {
		errs = append(errs, &tooLarge)
	}
	return errors.Join(errs...)
}

// requestTooLarge reports whether etcd (or gRPC, before it) refused a
// request for its size.
func requestTooLarge(err error) bool {
	return errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		status.Code(errors.Unwrap(err)) == codes.ResourceExhausted || status.Code(err) == codes.ResourceExhausted
}

// batch writes one transaction's worth of writes, adding the fenced ones to
// fenced.
func (r *recorder) batch(ctx context.Context, common []clientv3.Cmp, writes []write, fenced *FencedError) error {
	// A write whose guard fails in one attempt is fenced for good (the
	// guarded revisions only move forward); the others can only fail
	// again if a guard changed in between, so a few attempts settle it.
	for attempt := 0; len(writes) > 0; attempt++ {
		ok, failed, err := r.txn(ctx, common, writes)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if failed == nil || attempt == 3 {
			// Guards this recorder cannot evaluate, or guards that keep
			// changing: find the fenced writes one by one.
			return r.one(ctx, common, writes, fenced)
		}
		if failed.common {
			fenced.Session = true
			for _, w := range writes {
				fenced.Keys = append(fenced.Keys, w.name())
			}
			return nil
		}
		rest := writes[:0:0]
		for i, w := range writes {
			if failed.writes[i] {
				fenced.Keys = append(fenced.Keys, w.name())
			} else {
				rest = append(rest, w)
			}
		}
		writes = rest
	}
	return nil
}

// chunk returns how many of writes fit in one transaction.
func (r *recorder) chunk(common []clientv3.Cmp, writes []write) int {
	cmps, ops, size := len(common), 0, 0
	for i, w := range writes {
		cmps += len(w.Guard)
		ops += w.ops()
		size += w.size()
		if i > 0 && (cmps > r.maxTxnOps || ops > r.maxTxnOps || size > r.maxBytes) {
			return i
		}
	}
	return len(writes)
}

// ops is the operations w puts in a transaction.
func (w write) ops() int {
	if w.KeepEntry {
		return len(w.Also)
	}
	return 1 + len(w.Also)
}

// size is the bytes of keys and values w puts in a transaction.
func (w write) size() int {
	n := 0
	if !w.KeepEntry {
		n = len(w.Key) + len(w.Value)
	}
	for _, op := range w.Also {
		n += len(op.KeyBytes()) + len(op.ValueBytes())
	}
	return n
}

// failedGuards says which guards of a failed transaction did not hold.
type failedGuards struct {
	common bool
	writes []bool // by index of the transaction's writes
}

// txn writes writes in one transaction. When its guard fails, failed says
// which guards did not hold, read in the same transaction (nil when a guard
// is of a kind guardHolds cannot evaluate).
func (r *recorder) txn(ctx context.Context, common []clientv3.Cmp, writes []write) (ok bool, failed *failedGuards, err error) {
	cmps := append([]clientv3.Cmp(nil), common...)
	var ops []clientv3.Op
	for _, w := range writes {
		cmps = append(cmps, w.Guard...)
		if !w.KeepEntry {
			ops = append(ops, clientv3.OpPut(w.Key, string(w.Value)))
		}
		ops = append(ops, w.Also...)
	}
	// The Else branch reads every guarded key (at most as many as there
	// are compares, so within the operation limit).
	var reads []clientv3.Op
	index := make(map[string]int)
	for i := range cmps {
		k := string(cmps[i].KeyBytes())
		if _, ok := index[k]; !ok {
			index[k] = len(reads)
			reads = append(reads, clientv3.OpGet(k, clientv3.WithKeysOnly()))
		}
	}
	resp, err := r.cli.Txn(ctx).If(cmps...).Then(ops...).Else(reads...).Commit()
	if err != nil {
		return false, nil, fmt.Errorf("coord: write %d ledger entries: %w", len(writes), err)
	}
	if resp.Succeeded {
		return true, nil, nil
	}
	holds := func(guard []clientv3.Cmp) (bool, bool) {
		for i := range guard {
			c := &guard[i]
			kvs := resp.Responses[index[string(c.KeyBytes())]].GetResponseRange().Kvs
			var kv *mvccpb.KeyValue
			if len(kvs) == 1 {
				kv = kvs[0]
			}
			held, known := guardHolds(c, kv)
			if !known || !held {
				return held, known
			}
		}
		return true, true
	}
	failed = &failedGuards{writes: make([]bool, len(writes))}
	held, known := holds(common)
	if !known {
		return false, nil, nil
	}
	failed.common = !held
	anyFailed := failed.common
	for i, w := range writes {
		held, known := holds(w.Guard)
		if !known {
			return false, nil, nil
		}
		failed.writes[i] = !held
		anyFailed = anyFailed || !held
	}
	if !anyFailed {
		// Read at the revision the compares failed at, so one must have
		// failed; if none did, do not guess.
		return false, nil, nil
	}
	return false, failed, nil
}

// guardHolds evaluates an equality compare of a key's create or mod
// revision against kv (nil: the key does not exist). known is false for any
// other kind of compare.
func guardHolds(c *clientv3.Cmp, kv *mvccpb.KeyValue) (held, known bool) {
	pc := c.GetCompare()
	if pc.Result != etcdserverpb.Compare_EQUAL || pc.RangeEnd != nil {
		return false, false
	}
	var got int64
	switch pc.Target {
	case etcdserverpb.Compare_MOD:
		if kv != nil {
			got = kv.ModRevision
		}
		return got == pc.GetModRevision(), true
	case etcdserverpb.Compare_CREATE:
		if kv != nil {
			got = kv.CreateRevision
		}
		return got == pc.GetCreateRevision(), true
	}
	return false, false
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
		ok, _, err := r.txn(ctx, common, []write{w})
		if err != nil {
			return err
		}
		if !ok {
			fenced.Keys = append(fenced.Keys, w.name())
		}
	}
	return nil
}
