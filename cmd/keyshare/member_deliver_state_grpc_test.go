package main

import (
	"context"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/deliver/deliverpb"
	"github.com/keyshare/keyshare/statestore"
	"github.com/keyshare/keyshare/statestore/statestoretest"
	"github.com/keyshare/keyshare/testutil"
)

// countingSink is a Delivery service that counts each key's records from
// the state each record comes with (ownMemory: in a map of its own
// instead, the switch-off) and answers the new count as the key's state.
type countingSink struct {
	deliverpb.UnimplementedDeliveryServer
	ownMemory bool

	mu       sync.Mutex
	memory   map[string]int
	previous int // records that came with previous: a key's later ones in a call
}

func (s *countingSink) Deliver(_ context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &deliverpb.DeliverResponse{}
	earlier := map[string]int{}
	for _, r := range req.GetRecords() {
		key, st := string(r.GetKey()), r.GetState()
		n := 0
		switch {
		case s.ownMemory:
			n = s.memory[key]
		case st.GetPrevious():
			s.previous++
			n = earlier[key]
		case st.Value != nil:
			n, _ = strconv.Atoi(string(st.Value))
		}
		n++
		earlier[key], s.memory[key] = n, n
		resp.Results = append(resp.Results, &deliverpb.Result{Status: deliverpb.RecordStatus_RECORD_STATUS_DONE,
			State: &deliverpb.StateChange{Value: []byte(strconv.Itoa(n))}})
	}
	return resp, nil
}

// serveCountingSink serves a new countingSink on addr until stop.
func serveCountingSink(t *testing.T, addr string) (*countingSink, func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	sink := &countingSink{ownMemory: os.Getenv("KEYSHARE_TEST_OWN_MEMORY") != "", memory: map[string]int{}}
	srv := grpc.NewServer()
	deliverpb.RegisterDeliveryServer(srv, sink)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return sink, srv.Stop
}

// TestMemberKeepsStateForGRPCEndpoint: `keyshare member --deliver
// grpc://... --state --batch-size 4` on a Go gRPC server that counts each
// key's records from the state sent alone (KeyState, previous on a key's
// later records in a call) and answers each count as a StateChange. The
// member leaves and a new member process takes the group's range, with
// its state restored from the changelog, while the server is replaced by
// a new one; each key's count in the changelog is its number of records.
// KEYSHARE_TEST_OWN_MEMORY=1 makes the server count in its own memory,
// which the new server lacks: the counts come out wrong.
func TestMemberKeepsStateForGRPCEndpoint(t *testing.T) {
	testutil.ParallelOnKfake(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	addr := freePort(t)
	sink, stopSink := serveCountingSink(t, addr)
	const n, keys = 300, 3 // few keys: a batch of 4 holds several records of one
	records := testutil.KeyedRecords(n, keys)
	args := []string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "g", "--topic", "orders", "--id", "a",
		"--state", "--deliver", "grpc://" + addr, "--batch-size", "4"}

	testutil.Produce(t, k.Brokers, "orders", records[:n/2])
	first, log := startDeliveringMember(t, args...)
	testutil.WaitFor(t, "the first half committed", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n/2
	})
	if err := first.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("the member did not leave cleanly: %v\n%s", err, log.String())
	}
	stopSink()
	sink.mu.Lock()
	previous := sink.previous
	sink.mu.Unlock()
	if previous == 0 && !sink.ownMemory {
		t.Errorf("no record came with previous: no call held two records of a key, so batches' state was not tested")
	}

	serveCountingSink(t, addr)
	startDeliveringMember(t, args...)
	testutil.Produce(t, k.Brokers, "orders", records[n/2:])
	testutil.WaitFor(t, "every record committed", 60*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == n
	})
	counts := statestoretest.Counts(t, k.Brokers, statestore.DefaultChangelog("g", "orders"), 1)
	for i := range keys {
		key := "key-" + strconv.Itoa(i)
		if counts[key] != n/keys {
			t.Errorf("key %s counted %d in the changelog, want %d (its records)", key, counts[key], n/keys)
		}
	}
	t.Logf("%d records came with previous before the restart", previous)
}
