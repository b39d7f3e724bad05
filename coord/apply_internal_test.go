package coord

import (
	"fmt"
	"math/bits"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord/internal/plan"
	"github.com/keyshare/keyshare/testutil"
)

// TestApplyConflictCostsLogN: of 64 changes written together, one whose
// key an owner wrote meanwhile is left for the next round and the other 63
// are written, in about 3·log2(64) transactions rather than one each.
func TestApplyConflictCostsLogN(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	cli, counts := countingClient(t, e.Endpoints)
	s := bareSession(t, cli, "apply", 128)
	s.cfg.MaxTxnOps = 128
	lkey := s.schema.Root() + "leader-test"
	lresp, err := cli.Put(t.Context(), lkey, "m1")
	if err != nil {
		t.Fatal(err)
	}
	l := &leader{s: s, key: lkey, rev: lresp.Header.Revision}

	const n = 64
	var changes []plan.Change
	for i := range n {
		key := fmt.Sprintf("%sx/%02d", s.schema.Root(), i)
		resp, err := cli.Put(t.Context(), key, "old")
		if err != nil {
			t.Fatal(err)
		}
		changes = append(changes, plan.Change{What: key,
			Guards: []plan.Guard{{Key: key, Rev: resp.Header.Revision}},
			Writes: []plan.Write{{Key: key, Value: "new"}}})
	}
	conflict := fmt.Sprintf("%sx/%02d", s.schema.Root(), 37)
	if _, err := cli.Put(t.Context(), conflict, "an owner's write"); err != nil {
		t.Fatal(err)
	}

	before := counts.get("/etcdserverpb.KV/Txn")
	retry, _, err := s.apply(t.Context(), l, 1, changes)
	if err != nil || !retry {
		t.Fatalf("apply: retry %v, error %v; want a retry for the conflict", retry, err)
	}
	txns := counts.get("/etcdserverpb.KV/Txn") - before
	if limit := 2 + 3*bits.Len(n-1); txns > limit {
		t.Fatalf("%d transactions for one conflict among %d changes, want at most %d", txns, n, limit)
	}
	resp, err := cli.Get(t.Context(), s.schema.Root()+"x/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, kv := range resp.Kvs {
		switch {
		case string(kv.Key) == conflict && string(kv.Value) != "an owner's write":
			t.Fatalf("the conflicting change overwrote the owner's write: %s", kv.Value)
		case string(kv.Value) == "new":
			written++
		}
	}
	if written != n-1 {
		t.Fatalf("%d changes written, want %d", written, n-1)
	}
	t.Logf("%d transactions", txns)
}
