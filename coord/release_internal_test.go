package coord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// rpcCounts counts the etcd requests a client makes, by gRPC method
// ("/etcdserverpb.KV/Txn", "/etcdserverpb.KV/Range", ...).
type rpcCounts struct {
	mu  sync.Mutex
	n   map[string]int
	kvs int // keys returned by reads
}

func (c *rpcCounts) keysRead() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kvs
}

func (c *rpcCounts) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// countingClient is an etcd client that counts its unary requests.
func countingClient(t *testing.T, endpoints []string) (*clientv3.Client, *rpcCounts) {
	t.Helper()
	counts := &rpcCounts{n: map[string]int{}}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		counts.mu.Lock()
		defer counts.mu.Unlock()
		counts.n[method]++
		switch r := reply.(type) {
		case *etcdserverpb.RangeResponse:
			counts.kvs += len(r.Kvs)
		case *etcdserverpb.TxnResponse:
			for _, op := range r.Responses {
				counts.kvs += len(op.GetResponseRange().GetKvs())
			}
		}
		return err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, counts
}

// bareSession is a Session with a registration and nothing running: enough
// for its guarded writes.
func bareSession(t *testing.T, cli *clientv3.Client, group string, maxTxnOps int) *Session {
	t.Helper()
	s := &Session{cli: cli, cfg: Config{MemberID: "m1", Prefix: "/keyshare", Group: group}, schema: schema.Group{Prefix: "/keyshare", Name: group}.Keys(), log: hclog.NewNullLogger(), rec: newRecorder(cli, maxTxnOps)}
	s.memberKey = s.schema.Member("m1")
	resp, err := cli.Put(t.Context(), s.memberKey, "{}")
	if err != nil {
		t.Fatal(err)
	}
	s.memberRev = resp.Header.Revision
	s.ttl = 10 * time.Second
	s.ctx, s.cancel = context.WithCancelCause(t.Context())
	s.releases = make(chan *releaseRequest)
	t.Cleanup(func() { s.cancel(context.Canceled); s.wg.Wait() })
	return s
}

// revokedRanges writes n range records of s's member, revoking to m2, one
// per partition of topic t, and returns them as assigned.
func revokedRanges(t *testing.T, s *Session, n int) []schema.RangeState {
	t.Helper()
	var out []schema.RangeState
	for i := range n {
		rec := schema.RangeRecord{V: recordVersion, Topic: "t", Partition: int32(i), Lo: 0, Hi: ledger.HashSpace, Owner: s.ID(), State: schema.StateRevoking, Target: "m2"}
		key := s.schema.Range("t", int32(i), 0)
		resp, err := s.cli.Put(t.Context(), key, mustJSON(rec))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, schema.RangeState{Key: key, Record: rec, Rev: resp.Header.Revision, LedgerKey: s.schema.LedgerEntry("t", int32(i), 0)})
	}
	return out
}

func TestReleaseRangesBatches(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	cli, counts := countingClient(t, e.Endpoints)

	t.Run("300 ranges with MaxTxnOps 32 take 19 transactions", func(t *testing.T) {
		s := bareSession(t, cli, "batch", 32)
		ranges := revokedRanges(t, s, 300)
		var rels []RangeRelease
		for i, r := range ranges {
			rels = append(rels, RangeRelease{Range: r, Final: sampleEntry(i)})
		}
		before := counts.get("/etcdserverpb.KV/Txn")
		if err := s.releaseRanges(t.Context(), rels); err != nil {
			t.Fatal(err)
		}
		// Two operations per range (its ledger entry and its record), 32
		// per transaction: 16 ranges each, ⌈300 ÷ 16⌉ = 19.
		if got := counts.get("/etcdserverpb.KV/Txn") - before; got != 19 {
			t.Fatalf("%d transactions, want 19", got)
		}
		checkReleased(t, s, rels, nil)
	})

	t.Run("ranges whose entry etcd holds rewrite only their records", func(t *testing.T) {
		s := bareSession(t, cli, "written", 32)
		ranges := revokedRanges(t, s, 100)
		var rels []RangeRelease
		entryRevs := make(map[string]int64)
		for i, r := range ranges {
			// Even ranges were flushed and have not changed since; odd
			// ones have changed.
			resp, err := cli.Put(t.Context(), r.LedgerKey, string(ledger.Encode(sampleEntry(i))))
			if err != nil {
				t.Fatal(err)
			}
			entryRevs[r.LedgerKey] = resp.Header.Revision
			final := sampleEntry(i)
			if i%2 == 1 {
				final = sampleEntry(i + 1000)
			}
			rels = append(rels, RangeRelease{Range: r, Final: final, Written: i%2 == 0})
		}
		before := counts.get("/etcdserverpb.KV/Txn")
		if err := s.releaseRanges(t.Context(), rels); err != nil {
			t.Fatal(err)
		}
		// One operation and two, alternating: 32 operations hold 21
		// ranges, so 100 take 5 transactions (7 if every entry were
		// rewritten).
		if got := counts.get("/etcdserverpb.KV/Txn") - before; got != 5 {
			t.Fatalf("%d transactions, want 5", got)
		}
		recs := dump(t, s.cli, s.schema.Ranges())
		entries := dump(t, s.cli, s.schema.Ledger())
		for i, rl := range rels {
			rec, err := decodeRange(s.schema, rl.Range.Key, []byte(recs[rl.Range.Key].value), 0)
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != schema.StateReleased {
				t.Fatalf("%s: state %s, want released", rl.Range.Key, rec.State)
			}
			e := entries[rl.Range.LedgerKey]
			if i%2 == 0 && e.rev != entryRevs[rl.Range.LedgerKey] {
				t.Fatalf("%s: entry rewritten at %d (written at %d) although etcd held it", rl.Range.Key, e.rev, entryRevs[rl.Range.LedgerKey])
			}
			if i%2 == 1 && e.rev != recs[rl.Range.Key].rev {
				t.Fatalf("%s: entry at revision %d, record at %d; want both in the release", rl.Range.Key, e.rev, recs[rl.Range.Key].rev)
			}
			mustEqual(t, fmt.Sprintf("final entry of %s", rl.Range.Key), readEntry(t, s.cli, rl.Range.LedgerKey, ledger.Full), rl.Final)
		}
	})

	t.Run("a fenced range does not block the others", func(t *testing.T) {
		s := bareSession(t, cli, "fenced", 32)
		ranges := revokedRanges(t, s, 300)
		var rels []RangeRelease
		for i, r := range ranges {
			rels = append(rels, RangeRelease{Range: r, Final: sampleEntry(i)})
		}
		// The leader took back the revoke of partition 7 (it rewrote the
		// record): that range is no longer this member's to release.
		taken := ranges[7].Record
		taken.State, taken.Target = schema.StateActive, ""
		if _, err := cli.Put(t.Context(), ranges[7].Key, mustJSON(taken)); err != nil {
			t.Fatal(err)
		}
		before := counts.get("/etcdserverpb.KV/Txn")
		mustFence(t, s.releaseRanges(t.Context(), rels), false, ranges[7].Key)
		// The failed transaction names the fenced range itself (it reads
		// the guarded keys); its other 15 ranges go in one more.
		if got := counts.get("/etcdserverpb.KV/Txn") - before; got != 20 {
			t.Fatalf("%d transactions, want 20", got)
		}
		checkReleased(t, s, rels, map[string]bool{ranges[7].Key: true})
	})

	t.Run("a lost session releases nothing", func(t *testing.T) {
		s := bareSession(t, cli, "lost", 32)
		ranges := revokedRanges(t, s, 40)
		var rels []RangeRelease
		var names []string
		for i, r := range ranges {
			rels = append(rels, RangeRelease{Range: r, Final: sampleEntry(i)})
			names = append(names, r.Key)
		}
		if _, err := cli.Delete(t.Context(), s.memberKey); err != nil {
			t.Fatal(err)
		}
		before := counts.get("/etcdserverpb.KV/Txn")
		mustFence(t, s.releaseRanges(t.Context(), rels), true, names...)
		// The first transaction shows the session gone; no more are tried.
		if got := counts.get("/etcdserverpb.KV/Txn") - before; got != 1 {
			t.Fatalf("%d transactions, want 1", got)
		}
		all := map[string]bool{}
		for _, n := range names {
			all[n] = true
		}
		checkReleased(t, s, rels, all)
	})
}

// checkReleased checks that every release not in fenced wrote its final
// entry and marked its range released in one transaction, and that the
// fenced ones changed nothing.
func checkReleased(t *testing.T, s *Session, rels []RangeRelease, fenced map[string]bool) {
	t.Helper()
	recs := dump(t, s.cli, s.schema.Ranges())
	entries := dump(t, s.cli, s.schema.Ledger())
	for _, rl := range rels {
		rec, err := decodeRange(s.schema, rl.Range.Key, []byte(recs[rl.Range.Key].value), 0)
		if err != nil {
			t.Fatal(err)
		}
		e, written := entries[rl.Range.LedgerKey]
		if fenced[rl.Range.Key] {
			if written || rec.State == schema.StateReleased {
				t.Fatalf("%s: fenced, but written (entry %v, state %s)", rl.Range.Key, written, rec.State)
			}
			continue
		}
		if rec.State != schema.StateReleased || !written || e.rev != recs[rl.Range.Key].rev {
			t.Fatalf("%s: state %s, entry written %v at revision %d, record at %d; want released with its entry in one transaction",
				rl.Range.Key, rec.State, written, e.rev, recs[rl.Range.Key].rev)
		}
		mustEqual(t, fmt.Sprintf("final entry of %s", rl.Range.Key), readEntry(t, s.cli, rl.Range.LedgerKey, ledger.Full), rl.Final)
	}
}

func TestReleaseCallsShareTransactions(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	cli, counts := countingClient(t, e.Endpoints)
	s := bareSession(t, cli, "shared", DefaultMaxTxnOps)
	s.goFunc(s.writeReleases)
	ranges := revokedRanges(t, s, 300)
	taken := ranges[42].Record
	taken.State, taken.Target = schema.StateActive, ""
	if _, err := cli.Put(t.Context(), ranges[42].Key, mustJSON(taken)); err != nil {
		t.Fatal(err)
	}

	// As the drains of a leaving member do: one Release per range, all at
	// about the same time.
	before := counts.get("/etcdserverpb.KV/Txn")
	errs := make([]error, len(ranges))
	var wg sync.WaitGroup
	var rels []RangeRelease
	for i, r := range ranges {
		rels = append(rels, RangeRelease{Range: r, Final: sampleEntry(i)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.ReleaseRanges(t.Context(), []RangeRelease{{Range: r, Final: sampleEntry(i)}})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i == 42 {
			mustFence(t, err, false, ranges[42].Key)
		} else if err != nil {
			t.Fatalf("release of %s: %v", ranges[i].Key, err)
		}
	}
	checkReleased(t, s, rels, map[string]bool{ranges[42].Key: true})
	// One transaction per range would be 300; batches of up to 64 ranges
	// take a handful, whatever the timing of the calls.
	if got := counts.get("/etcdserverpb.KV/Txn") - before; got > 150 {
		t.Fatalf("%d transactions for 300 concurrent releases: the calls were not batched", got)
	}
	t.Logf("%d transactions for 300 concurrent releases", counts.get("/etcdserverpb.KV/Txn")-before)
}

func TestReleaseAfterTheSessionEnds(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)
	s := bareSession(t, cli, "ended", DefaultMaxTxnOps)
	s.goFunc(s.writeReleases)
	r := revokedRanges(t, s, 1)[0]
	s.cancel(ErrSessionLost)
	if err := s.ReleaseRanges(t.Context(), []RangeRelease{{Range: r, Final: sampleEntry(0)}}); !errors.Is(err, ErrSessionLost) {
		t.Fatalf("Release after the session ended = %v, want ErrSessionLost", err)
	}
}
