package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// txnHook is an etcd KV that calls before with a transaction's operations
// just before it sends the transaction.
type txnHook struct {
	clientv3.KV
	before func(ops []clientv3.Op)
}

func (k txnHook) Txn(ctx context.Context) clientv3.Txn {
	return &hookedTxn{Txn: k.KV.Txn(ctx), before: k.before}
}

type hookedTxn struct {
	clientv3.Txn
	before func(ops []clientv3.Op)
	ops    []clientv3.Op
}

func (t *hookedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *hookedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}

func (t *hookedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.ops = append(t.ops, ops...)
	t.Txn = t.Txn.Then(ops...)
	return t
}

func (t *hookedTxn) Commit() (*clientv3.TxnResponse, error) {
	t.before(t.ops)
	return t.Txn.Commit()
}

// releases reports whether ops mark a range released.
func releases(ops []clientv3.Op) bool {
	for _, op := range ops {
		var rec schema.RangeRecord
		if op.IsPut() && json.Unmarshal(op.ValueBytes(), &rec) == nil && rec.State == schema.StateReleased {
			return true
		}
	}
	return false
}

// TestDrainCancelsBeforeRelease: a revoked range's drain budget ends with a
// record still in flight — its handler running, or waiting to retry after
// a failure. Once the release is written the next owner may run the key,
// so the record's context must be cancelled before the release is sent,
// and no attempt may start after that.
func TestDrainCancelsBeforeRelease(t *testing.T) {
	testutil.RequireKfake(t, "the pipeline's drain, revoke and flush against etcd, which the broker only feeds with records; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	for _, tc := range []struct {
		name string
		fail bool // the handler fails at once (the record waits to retry); else it runs until cancelled
	}{
		{"running handler", false},
		{"retry in backoff", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu         sync.Mutex
				attempts   []context.Context
				late       int      // attempts begun with their context already ended
				problems   []string // what the release hook found
				releaseTxn int
			)
			started := make(chan struct{})
			var once sync.Once
			h := func(ctx context.Context, m *kafka.Message) error {
				mu.Lock()
				attempts = append(attempts, ctx)
				if ctx.Err() != nil {
					late++
				}
				mu.Unlock()
				once.Do(func() { close(started) })
				if tc.fail {
					return errors.New("failing on purpose")
				}
				<-ctx.Done()
				return ctx.Err()
			}
			before := func(ops []clientv3.Op) {
				if !releases(ops) {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				releaseTxn++
				for i, ctx := range attempts {
					if ctx.Err() == nil {
						problems = append(problems, fmt.Sprintf("attempt %d of %d: its context was live when the release was sent", i+1, len(attempts)))
					}
				}
			}
			r := newRigWith(t, h, true, rigOptions{
				kv: func(kv clientv3.KV) clientv3.KV { return txnHook{KV: kv, before: before} },
				mutate: func(c *Config) {
					c.Retry.MaxAttempts, c.Retry.Backoff, c.Retry.MaxBackoff = 1000, 100*time.Millisecond, 100*time.Millisecond
				},
			})
			r.put(r.full(schema.StateActive), initialized(0))
			testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(1, 1))
			wait(t, "the record's first attempt", started)

			rev := r.full(schema.StateRevoking)
			rev.Target, rev.DrainMs = "other", 300
			r.put(rev, nil)
			testutil.WaitFor(t, "the range released", 20*time.Second, func() bool { return r.stored().Record.State == schema.StateReleased })
			testutil.WaitFor(t, "the record's worker done", 10*time.Second, func() bool {
				return r.p.sched.Idle()
			})
			mu.Lock()
			defer mu.Unlock()
			if releaseTxn == 0 {
				t.Fatal("the hook saw no release transaction")
			}
			for _, p := range problems {
				t.Error(p)
			}
			if late > 0 {
				t.Errorf("%d attempts started after the record's context was cancelled", late)
			}
		})
	}
}

// TestReleaseFencedByTakeBack: the leader takes a revoke back just as the
// range's release is sent, so etcd refuses the release (the range record
// has moved on) before the member's view has the new record. The member
// must keep the range with the completions the release carried: a record
// handled after the last flush runs once, not again from the older state
// in etcd.
func TestReleaseFencedByTakeBack(t *testing.T) {
	testutil.RequireKfake(t, "the pipeline's drain, revoke and release against etcd, which the broker only feeds with records; the kfake run covers it")
	testutil.ParallelOnKfake(t)
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
		takeBack int64 // the revision of the record taking the revoke back
	)
	before := func(ops []clientv3.Op) {
		if !releases(ops) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if takeBack == 0 {
			takeBack = r.put(r.full(schema.StateActive), nil)
		}
	}
	r = newRigWith(t, h, true, rigOptions{
		kv: func(kv clientv3.KV) clientv3.KV { return txnHook{KV: kv, before: before} },
		mutate: func(c *Config) {
			c.FlushInterval = time.Hour // only the flushes a revoke or a new range asks for
		},
	})
	r.put(r.full(schema.StateActive), initialized(0))
	testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(last+1, last+1))
	testutil.WaitFor(t, "the records before the last handled", 20*time.Second, func() bool { return rn.doneCount() == last })

	rev := r.full(schema.StateRevoking)
	rev.Target, rev.DrainMs = "other", 10000
	r.put(rev, nil)
	testutil.WaitFor(t, "the revoke applied and flushed", 20*time.Second, func() bool {
		return r.owned(func(w *owned) bool { return w != nil && w.revoking && w.inEtcd() })
	})
	close(gate) // the last record completes in memory only; the drain releases it
	testutil.WaitFor(t, "the revoke taken back", 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return takeBack != 0 && r.owned(func(w *owned) bool { return w != nil && !w.revoking && w.rs.Rev >= takeBack })
	})
	testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(1, 1))
	testutil.WaitFor(t, "the range's watermark past the new record", 20*time.Second, func() bool {
		return r.owned(func(w *owned) bool { return w != nil && w.st.Watermark() == last+2 })
	})
	rn.twice(t)
	if got := r.stored().Record.State; got != schema.StateActive {
		t.Errorf("the range record is %s, want active (the revoke was taken back)", got)
	}
}

// TestLeavingTakesNoRevokeBack: once a member leaves, its view shows every
// range as revoking. An assignment read before the leave and applied after
// it (a reread's answer, at the same revision) shows the range active; it
// must not take the revoke back, or the member would run records of a
// range whose release (under the leader's handoff plan) carries its state
// from before them.
func TestLeavingTakesNoRevokeBack(t *testing.T) {
	testutil.RequireKfake(t, "the pipeline's leave and drain against etcd, which the broker only feeds with records; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	gate := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, m *kafka.Message) error {
		once.Do(func() { close(started) })
		select {
		case <-gate:
		case <-ctx.Done():
		}
		return nil
	}
	r := newRigWith(t, h, true, rigOptions{})
	r.put(r.full(schema.StateActive), initialized(0))
	testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(1, 1))
	wait(t, "the record's handler", started)
	before, err := r.sess.ReadAssignment(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.sess.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the range revoking", 20*time.Second, func() bool {
		return r.owned(func(w *owned) bool { return w != nil && w.revoking && w.draining })
	})
	// The read's answer comes at the revision the leave was applied at. The
	// view's own revision may pass the read's before the leave publishes (a
	// progress notice from etcd), and an answer older than the one applied
	// is ignored whatever it holds; the answer that must not take the
	// revoke back is one at the same revision.
	r.p.mu.Lock()
	before.Rev = r.p.mu.rev
	r.p.mu.Unlock()
	// The fetch loop takes one reread at a time: once the second send is
	// taken, the first answer has been handled.
	for range 2 {
		r.p.reread <- before
	}
	if !r.owned(func(w *owned) bool { return w != nil && w.revoking && w.draining }) {
		t.Fatal("a leaving member took its range's revoke back")
	}
	close(gate)
	testutil.WaitFor(t, "the range released", 20*time.Second, func() bool { return r.stored().Record.State == schema.StateReleased })
}

// TestDrainSaysWhatItWaitsFor: a revoked range's record runs on (a
// handler waiting out a stuck key or a down endpoint). A second into its
// drain, the member says once which range it drains, how many records
// and which keys it waits for, and its budget, before the budget ends.
func TestDrainSaysWhatItWaitsFor(t *testing.T) {
	testutil.RequireKfake(t, "the pipeline's drain against etcd; the kfake run covers it")
	testutil.ParallelOnKfake(t)
	started := make(chan struct{})
	var once sync.Once
	var logs testutil.Buffer
	r := newRigWith(t, func(ctx context.Context, m *kafka.Message) error {
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	}, true, rigOptions{mutate: func(c *Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	}})
	r.put(r.full(schema.StateActive), initialized(0))
	testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(1, 1))
	wait(t, "the record running", started)
	rev := r.full(schema.StateRevoking)
	rev.Target, rev.DrainMs = "other", 4000
	r.put(rev, nil)
	testutil.WaitFor(t, "the range released", 20*time.Second, func() bool { return r.stored().Record.State == schema.StateReleased })
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "draining a revoked range") {
			if line != "" {
				t.Errorf("the drain said twice what it waits for:\n%s\n%s", line, l)
			}
			line = l
		}
	}
	for _, want := range []string{"in_flight=1", "keys=key-0", "budget=4s"} {
		if !strings.Contains(line, want) {
			t.Errorf("the drain's line %q does not say %s", line, want)
		}
	}
}
