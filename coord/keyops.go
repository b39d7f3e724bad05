package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// Operations on one key (keyops/, state.KeyOpRecord): written by an
// operator (admin), read by every member through a watch, applied and
// deleted by the member that owns the key's hash.

// KeyOp is one stored operation on a key.
type KeyOp struct {
	Name   string // its etcd key
	Record schema.KeyOpRecord
	Rev    int64 // its ModRevision: the guard of a change to this version
	Err    error // the value is damaged (Record is then empty)
}

// ErrKeyOpChanged: a guarded write or delete of a key's operation found
// another version than the one it was for (written or deleted meanwhile).
var ErrKeyOpChanged = errors.New("coord: the key's operation changed meanwhile")

func keyOpOf(g schema.Group, kv *mvccpb.KeyValue) KeyOp {
	r, err := schema.DecodeKeyOp(g, string(kv.Key), kv.Value)
	return KeyOp{Name: string(kv.Key), Record: r, Rev: kv.ModRevision, Err: err}
}

// ReadKeyOps reads every operation on a key of the group, in key order,
// and the revision they were read at.
func ReadKeyOps(ctx context.Context, cli *clientv3.Client, g schema.Group) ([]KeyOp, int64, error) {
	s := schemaOf(g)
	resp, err := cli.Get(ctx, s.KeyOps(), clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("coord: read %s: %w", s.KeyOps(), err)
	}
	ops := make([]KeyOp, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ops = append(ops, keyOpOf(g, kv))
	}
	return ops, resp.Header.Revision, nil
}

// ReadKeyOp reads the operation on key of topic/partition, if any.
func ReadKeyOp(ctx context.Context, cli *clientv3.Client, g schema.Group, topic string, partition int32, key []byte) (KeyOp, bool, error) {
	name := schemaOf(g).KeyOp(topic, partition, ledger.Hash(key, 0), key)
	resp, err := cli.Get(ctx, name)
	if err != nil {
		return KeyOp{}, false, fmt.Errorf("coord: read %s: %w", textsafe.Quote(name), err)
	}
	if len(resp.Kvs) == 0 {
		return KeyOp{}, false, nil
	}
	return keyOpOf(g, resp.Kvs[0]), true, nil
}

// PutKeyOp writes rec (rec.V, rec.Hash and rec.At are filled in) where no
// operation on its key exists (rev 0), or over the version at rev; it
// returns ErrKeyOpChanged if the key holds another, and the stored op.
func PutKeyOp(ctx context.Context, cli *clientv3.Client, g schema.Group, rec schema.KeyOpRecord, rev int64) (KeyOp, error) {
	rec.V, rec.Hash = recordVersion, uint64(ledger.Hash(rec.Key, 0))
	if rec.Key == nil {
		rec.Key = []byte{}
	}
	if rec.At.IsZero() {
		rec.At = time.Now().UTC()
	}
	if err := rec.Check(); err != nil {
		return KeyOp{}, fmt.Errorf("coord: operation on key %s: %w", textsafe.Quote(string(rec.Key)), err)
	}
	name := schemaOf(g).KeyOp(rec.Topic, rec.Partition, uint32(rec.Hash), rec.Key)
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(name), "=", rev)).
		Then(clientv3.OpPut(name, mustJSON(rec))).Commit()
	if err != nil {
		return KeyOp{}, fmt.Errorf("coord: write %s: %w", textsafe.Quote(name), err)
	}
	if !resp.Succeeded {
		return KeyOp{}, ErrKeyOpChanged
	}
	return KeyOp{Name: name, Record: rec, Rev: resp.Header.Revision}, nil
}

// DeleteKeyOp deletes op if it is still the version read (op.Rev); it
// reports whether it did.
func DeleteKeyOp(ctx context.Context, cli *clientv3.Client, op KeyOp) (bool, error) {
	resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(op.Name), "=", op.Rev)).
		Then(clientv3.OpDelete(op.Name)).Commit()
	if err != nil {
		return false, fmt.Errorf("coord: delete %s: %w", textsafe.Quote(op.Name), err)
	}
	return resp.Succeeded, nil
}

// keyOpsView is a member's watch-fed copy of the group's key operations.
type keyOpsView struct {
	mu   sync.Mutex
	ops  map[string]KeyOp // by etcd key
	wake chan struct{}    // closed and replaced on every change
	// n is len(ops), read without mu: every record asks for its key's
	// operation, and nearly always there is none in the whole group.
	n atomic.Int64
}

func newKeyOpsView() *keyOpsView {
	return &keyOpsView{ops: make(map[string]KeyOp), wake: make(chan struct{})}
}

func (v *keyOpsView) set(all []KeyOp) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ops = make(map[string]KeyOp, len(all))
	for _, op := range all {
		v.ops[op.Name] = op
	}
	v.n.Store(int64(len(v.ops)))
	close(v.wake)
	v.wake = make(chan struct{})
}

func (v *keyOpsView) apply(put []KeyOp, deleted []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, op := range put {
		v.ops[op.Name] = op
	}
	for _, k := range deleted {
		delete(v.ops, k)
	}
	v.n.Store(int64(len(v.ops)))
	close(v.wake)
	v.wake = make(chan struct{})
}

// KeyOp returns the operation stored for key of topic/partition, as the
// member's watch last saw it (within about a second of its write). A
// damaged value is not returned: it is logged, and shown by keyshare
// status, but never applied.
func (s *Session) KeyOp(topic string, partition int32, key []byte) (KeyOp, bool) {
	v := s.keyOps
	if v.n.Load() == 0 {
		return KeyOp{}, false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	op, ok := v.ops[s.schema.KeyOp(topic, partition, ledger.Hash(key, 0), key)]
	if !ok || op.Err != nil {
		return KeyOp{}, false
	}
	return op, true
}

// HasKeyOps reports whether the member's watch holds any operation, as a
// test before KeyOp: a member asks for every record it handles, and nearly
// always there is none. KeyOp answers that case without its lock too, but
// with an empty KeyOp of about 250 bytes that its callers copy back; this
// answers with a bool.
func (s *Session) HasKeyOps() bool { return s.keyOps.n.Load() != 0 }

// KeyOps returns every readable operation the member's watch holds.
func (s *Session) KeyOps() []KeyOp {
	v := s.keyOps
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]KeyOp, 0, len(v.ops))
	for _, op := range v.ops {
		if op.Err == nil {
			out = append(out, op)
		}
	}
	return out
}

// KeyOpsChanged is closed at the next change of the group's key
// operations.
func (s *Session) KeyOpsChanged() <-chan struct{} {
	s.keyOps.mu.Lock()
	defer s.keyOps.mu.Unlock()
	return s.keyOps.wake
}

// DeleteKeyOp deletes op, an operation done, if it is still the version
// read.
func (s *Session) DeleteKeyOp(ctx context.Context, op KeyOp) (bool, error) {
	return DeleteKeyOp(ctx, s.cli, op)
}

// RefuseKeyOp records on op, if it is still the version read, why this
// member does not apply it.
func (s *Session) RefuseKeyOp(ctx context.Context, op KeyOp, why string) error {
	rec := op.Record
	rec.Refused = fmt.Sprintf("%s: %s", s.cfg.MemberID, why)
	_, err := PutKeyOp(ctx, s.cli, s.group(), rec, op.Rev)
	return err
}

// watchKeyOps keeps the session's key operations current for its life.
func (s *Session) watchKeyOps() {
	g := s.group()
	warned := make(map[string]int64) // damaged values logged, by key and revision
	warn := func(op KeyOp) {
		if op.Err != nil && warned[op.Name] != op.Rev {
			warned[op.Name] = op.Rev
			s.log.Error("an operation on a key is damaged; it is not applied (rewrite it with keyshare key, or delete it)", "error", op.Err)
		}
	}
	for s.ctx.Err() == nil {
		all, rev, err := ReadKeyOps(s.ctx, s.cli, g)
		if err != nil {
			s.log.Warn("read key operations", "error", err)
			sleep(s.ctx, time.Second)
			continue
		}
		for _, op := range all {
			warn(op)
		}
		s.keyOps.set(all)
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
		for wr := range s.cli.Watch(wctx, s.schema.KeyOps(), clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			var put []KeyOp
			var deleted []string
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					deleted = append(deleted, string(ev.Kv.Key))
					continue
				}
				op := keyOpOf(g, ev.Kv)
				warn(op)
				put = append(put, op)
			}
			s.keyOps.apply(put, deleted)
		}
		cancel()
		sleep(s.ctx, 200*time.Millisecond)
	}
}

// AdvanceKeyOp rewrites op as rec (an unpark's progress), guarded by op's
// version, this member's registration and its ownership of r, the range
// holding the key: a member that lost the range cannot write over its new
// owner's progress. It returns the op as stored, or ErrKeyOpChanged when
// a guard fails.
func (s *Session) AdvanceKeyOp(ctx context.Context, op KeyOp, rec schema.KeyOpRecord, r schema.RangeState) (KeyOp, error) {
	if err := rec.Check(); err != nil {
		return KeyOp{}, fmt.Errorf("coord: %s: %w", textsafe.Quote(op.Name), err)
	}
	cmps := append(append(s.common(), s.guard(r)...), clientv3.Compare(clientv3.ModRevision(op.Name), "=", op.Rev))
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpPut(op.Name, mustJSON(rec))).Commit()
	if err != nil {
		return KeyOp{}, fmt.Errorf("coord: write %s: %w", textsafe.Quote(op.Name), err)
	}
	if !resp.Succeeded {
		return KeyOp{}, ErrKeyOpChanged
	}
	return KeyOp{Name: op.Name, Record: rec, Rev: resp.Header.Revision}, nil
}

// FinishKeyOp deletes op, done, under the guards of AdvanceKeyOp, and
// returns the revision of the delete.
func (s *Session) FinishKeyOp(ctx context.Context, op KeyOp, r schema.RangeState) (int64, error) {
	cmps := append(append(s.common(), s.guard(r)...), clientv3.Compare(clientv3.ModRevision(op.Name), "=", op.Rev))
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(clientv3.OpDelete(op.Name)).Commit()
	if err != nil {
		return 0, fmt.Errorf("coord: delete %s: %w", textsafe.Quote(op.Name), err)
	}
	if !resp.Succeeded {
		return 0, ErrKeyOpChanged
	}
	return resp.Header.Revision, nil
}

// ReadKeyOp reads the operation on key of topic/partition from etcd, not
// from the watch's copy: a range's new owner resumes an operation from the
// progress its previous owner wrote last, which the watch may not have
// brought yet.
func (s *Session) ReadKeyOp(ctx context.Context, topic string, partition int32, key []byte) (KeyOp, bool, error) {
	return ReadKeyOp(ctx, s.cli, s.group(), topic, partition, key)
}
