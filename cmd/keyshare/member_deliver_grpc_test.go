package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/keyshare/keyshare/deliver/deliverpb"
	"github.com/keyshare/keyshare/testutil"
)

// grpcSink is a Delivery service that refuses one key's records
// (RECORD_STATUS_FAILED) and keeps the others.
type grpcSink struct {
	deliverpb.UnimplementedDeliveryServer
	refuse string

	mu      sync.Mutex
	applied []*deliverpb.Record
	tokens  map[string]bool // the authorization metadata seen
	members map[string]bool // the requests' member ids
}

func (s *grpcSink) Deliver(ctx context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	resp := &deliverpb.DeliverResponse{}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[req.GetMember()] = true
	for _, v := range md.Get("authorization") {
		s.tokens[v] = true
	}
	for _, r := range req.GetRecords() {
		if string(r.GetKey()) == s.refuse {
			resp.Results = append(resp.Results, &deliverpb.Result{Status: deliverpb.RecordStatus_RECORD_STATUS_FAILED, Error: "key " + s.refuse + " is refused"})
			continue
		}
		s.applied = append(s.applied, r)
		resp.Results = append(resp.Results, &deliverpb.Result{Status: deliverpb.RecordStatus_RECORD_STATUS_DONE})
	}
	return resp, nil
}

// TestMemberDeliversByGRPC: `keyshare member --deliver grpc://...` on a
// Go gRPC server: every record of the keys the server takes arrives once,
// in key order, with its range and fence and the token in metadata; the
// refused key's records are tried --max-attempts times and dead-lettered
// with the server's reason.
func TestMemberDeliversByGRPC(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sink := &grpcSink{refuse: "key-3", tokens: map[string]bool{}, members: map[string]bool{}}
	srv := grpc.NewServer()
	deliverpb.RegisterDeliveryServer(srv, sink)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok-123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const n, keys = 40, 5
	testutil.Produce(t, k.Brokers, "orders", testutil.KeyedRecords(n, keys))
	_, log := startDeliveringMember(t, "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders",
		"--id", "a", "--deliver", "grpc://"+ln.Addr().String(), "--deliver-token-file", token, "--batch-size", "4",
		"--dlq", "orders.dlq", "--max-attempts", "2", "--retry-backoff", "10ms", "--log-level", "trace")
	testutil.WaitFor(t, "the commit past every record", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})
	dead := readPartition(t, k.Brokers, "orders.dlq")
	if len(dead) != n/keys {
		t.Fatalf("%d dead letters, want the %d records of key-3", len(dead), n/keys)
	}
	for _, m := range dead {
		if string(m.Key) != "key-3" || header(m, "keyshare.attempts") != "2" ||
			!strings.Contains(header(m, "keyshare.error"), "the endpoint failed the record: key key-3 is refused") {
			t.Errorf("dead letter %s: attempts %q, error %q; want key-3 after 2 attempts with the server's reason",
				m.Key, header(m, "keyshare.attempts"), header(m, "keyshare.error"))
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	got := make([]applied, len(sink.applied))
	for i, r := range sink.applied {
		if r.GetRange() == nil || r.Fence == nil || uint64(r.GetHash()) < r.GetRange().GetLo() || uint64(r.GetHash()) >= r.GetRange().GetHi() {
			t.Fatalf("%s: hash %d, range %v, fence %v: want the range holding the hash and its token", r.GetValue(), r.GetHash(), r.GetRange(), r.Fence)
		}
		got[i] = applied{Key: string(r.GetKey()), Value: string(r.GetValue()), Offset: r.GetOffset()}
	}
	if dups := checkKeyOrder(t, got, n-n/keys, keys-1); dups != 0 {
		t.Errorf("%d records delivered twice, want none", dups)
	}
	if len(sink.members) != 1 || !sink.members["a"] {
		t.Errorf("members seen %v, want a", sink.members)
	}
	if len(sink.tokens) != 1 || !sink.tokens["Bearer tok-123"] {
		t.Errorf("authorization metadata seen %v, want the token file's", sink.tokens)
	}
	if strings.Contains(log.String(), "tok-123") {
		t.Error("the member's trace-level log shows the token")
	}
}
