package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// committedHook is an etcd KV that calls after with a transaction's
// operations once etcd has committed it (its guards held).
type committedHook struct {
	clientv3.KV
	after func(ops []clientv3.Op)
}

func (k committedHook) Txn(ctx context.Context) clientv3.Txn {
	return &committedTxn{Txn: k.KV.Txn(ctx), after: k.after}
}

type committedTxn struct {
	clientv3.Txn
	after func(ops []clientv3.Op)
	ops   []clientv3.Op
}

func (t *committedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *committedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *committedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.ops = append(t.ops, ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *committedTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && resp.Succeeded {
		t.after(t.ops)
	}
	return resp, err
}

// TestTakeBackAfterRelease: the member releases a revoked range, and the
// leader, whose plan no longer moves it, hands the released range straight
// back to it ("a released one is handed back to its owner"). The release
// carries a completion that is in memory only (etcd's entry before it is
// older), so a member that resumed from the older state would run that
// record again, and one that resumed past it would skip records. Both
// orders of the member's two inputs are driven: the release's answer
// before the view shows the hand-back, and the hand-back applied while the
// release's answer is still on its way. Either way the range goes on from
// the state the release wrote: every record runs exactly once (a graceful
// handoff allows no duplicate) and a record produced afterwards is handled.
func TestTakeBackAfterRelease(t *testing.T) {
	testutil.RequireKfake(t, "the pipeline's drain, release and hand-back against etcd, which the broker only feeds with records; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	for _, tc := range []struct {
		name string
		// handBackFirst: the hand-back is written and applied by the
		// member before its release call returns.
		handBackFirst bool
	}{
		{"release answered first", false},
		{"hand-back applied first", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testTakeBackAfterRelease(t, tc.handBackFirst)
		})
	}
}

func testTakeBackAfterRelease(t *testing.T, handBackFirst bool) {
	rn := newRuns()
	gate := make(chan struct{})
	const last = 9 // the record handled during the drain, after the revoke's flush
	h := func(ctx context.Context, m *kafka.Message) error {
		o := int64(m.TopicPartition.Offset)
		rn.start(o)
		if o == last {
			<-gate
		}
		rn.finish(o)
		return nil
	}
	var (
		r        *rig
		mu       sync.Mutex
		released bool
		handBack int64 // the revision of the record handing the range back
	)
	after := func(ops []clientv3.Op) {
		if !releases(ops) {
			return
		}
		mu.Lock()
		released = true
		if !handBackFirst {
			mu.Unlock()
			return
		}
		rev := r.put(r.full(schema.StateActive), nil) // the entry stays the release's
		handBack = rev
		mu.Unlock()
		// Hold the release's answer until the member has applied the
		// hand-back.
		testutil.WaitFor(t, "the hand-back applied while the release is answered", 20*time.Second, func() bool {
			r.p.mu.Lock()
			defer r.p.mu.Unlock()
			for _, rs := range r.p.latest.Ranges {
				if rs.Key == r.rangeKey() && rs.Rev >= rev {
					return true
				}
			}
			return false
		})
	}
	r = newRigWith(t, h, true, rigOptions{
		kv: func(kv clientv3.KV) clientv3.KV { return committedHook{KV: kv, after: after} },
		mutate: func(c *Config) {
			c.FlushInterval = time.Hour // only the flushes a revoke or a new range asks for
		},
	})
	r.put(r.full(schema.StateActive), initialized(0))
	testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(last+1, last+1))
	testutil.WaitFor(t, "the records before the last handled", 20*time.Second, func() bool { return rn.doneCount() == last })

	rev := r.full(schema.StateRevoking)
	rev.Target, rev.DrainMs = "m", 10000 // a revoke to self, as a merge's
	r.put(rev, nil)
	testutil.WaitFor(t, "the revoke applied and flushed", 20*time.Second, func() bool {
		return r.owned(func(w *owned) bool { return w != nil && w.revoking && w.inEtcd() })
	})
	close(gate) // the last record completes in memory only; the release carries it
	testutil.WaitFor(t, "the range released", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return released
	})
	if !handBackFirst {
		if got := r.stored().Record.State; got != schema.StateReleased {
			t.Fatalf("the range record is %s after the release, want released", got)
		}
		testutil.WaitFor(t, "the released range out of the member's table", 20*time.Second, func() bool {
			return r.owned(func(w *owned) bool { return w == nil })
		})
		mu.Lock()
		handBack = r.put(r.full(schema.StateActive), nil) // the entry stays the release's
		mu.Unlock()
	}
	if got, _ := r.stored().Entry.Watermark(); got != last+1 {
		t.Fatalf("etcd's entry after the release has watermark %d, want %d (the completion carried by the release)", got, last+1)
	}
	testutil.WaitFor(t, "the range active again on the member", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return r.owned(func(w *owned) bool { return w != nil && !w.revoking && w.rs.Rev >= handBack })
	})
	testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(1, 1))
	testutil.WaitFor(t, "the record produced after the hand-back handled", 20*time.Second, func() bool { return rn.isDone(last + 1) })
	testutil.WaitFor(t, "the range's watermark past the new record", 20*time.Second, func() bool {
		return r.owned(func(w *owned) bool { return w != nil && w.st.Watermark() == last+2 })
	})
	for o := int64(0); o <= last+1; o++ {
		if !rn.isDone(o) {
			t.Errorf("record at offset %d was never handled", o)
		}
	}
	rn.twice(t)
}
