package devcluster

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func startTestCluster(t *testing.T) *EtcdCluster {
	t.Helper()
	c, err := StartEtcdCluster(EtcdClusterOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testClient(t *testing.T, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func testPut(cli *clientv3.Client, key, val string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cli.Put(ctx, key, val)
	return err
}

// waitSerializable polls a serializable Get on endpoint, which the member answers
// from its own copy, until key has want: a follower applies a write
// shortly after the leader acknowledged it.
func waitSerializable(t *testing.T, endpoint, key, want string) {
	t.Helper()
	cli := testClient(t, endpoint)
	deadline := time.Now().Add(10 * time.Second)
	got := "<absent>"
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := cli.Get(ctx, key, clientv3.WithSerializable())
		cancel()
		if err == nil && len(resp.Kvs) == 1 {
			if got = string(resp.Kvs[0].Value); got == want {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: %s = %q, want %q", endpoint, key, got, want)
}

func otherEndpoints(c *EtcdCluster, i int) []string {
	var eps []string
	for j, ep := range c.Endpoints() {
		if j != i {
			eps = append(eps, ep)
		}
	}
	return eps
}

func TestEtcdClusterReplicates(t *testing.T) {
	c := startTestCluster(t)
	if n := len(c.Endpoints()); n != 3 {
		t.Fatalf("%d endpoints, want 3", n)
	}
	if err := testPut(testClient(t, c.Endpoints()...), "k", "v", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, ep := range c.Endpoints() {
		waitSerializable(t, ep, "k", "v")
	}
	c.Close()
	c.Close()
	if err := c.Restart(0); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
}

func TestEtcdClusterStopRestartLeader(t *testing.T) {
	c := startTestCluster(t)
	endpoints := c.Endpoints()
	lead, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	// An open watch would hold up a graceful shutdown for 7 s; Stop
	// drops it as a crash would.
	watcher := testClient(t, endpoints[lead])
	watcher.Watch(context.Background(), "k")
	if err := testPut(watcher, "watched", "1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Stop(lead); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop took %s with a watch open", d)
	}
	if err := c.Stop(lead); err == nil {
		t.Fatal("stopping a stopped member succeeded")
	}
	start = time.Now()
	next, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	if next == lead {
		t.Fatalf("stopped member %d is still the leader", lead)
	}
	t.Logf("member %d leads %s after member %d stopped", next, time.Since(start), lead)
	if err := testPut(testClient(t, otherEndpoints(c, lead)...), "k", "while-down", 5*time.Second); err != nil {
		t.Fatal(err)
	}

	if err := c.Restart(lead); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(lead); err == nil {
		t.Fatal("restarting a running member succeeded")
	}
	if got := c.Endpoints(); got[lead] != endpoints[lead] {
		t.Fatalf("endpoint %d moved from %s to %s", lead, endpoints[lead], got[lead])
	}
	waitSerializable(t, endpoints[lead], "k", "while-down")
}

func TestEtcdClusterIsolateLeader(t *testing.T) {
	c := startTestCluster(t)
	lead, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	if err := testPut(testClient(t, c.Endpoints()...), "before", "1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Isolate(lead)
	start := time.Now()

	// The cut-off member still accepts the client's write but can never
	// commit it. Meanwhile the other two elect a leader among themselves.
	isolatedCli := testClient(t, c.Endpoints()[lead])
	isolatedErr := make(chan error, 1)
	go func() { isolatedErr <- testPut(isolatedCli, "k", "isolated", 3*time.Second) }()
	next, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	if next == lead {
		t.Fatalf("isolated member %d is still the leader", lead)
	}
	t.Logf("member %d leads %s after member %d was isolated", next, time.Since(start), lead)
	if err := testPut(testClient(t, otherEndpoints(c, lead)...), "k", "majority", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	err = <-isolatedErr
	if err == nil {
		t.Fatal("write through the isolated member succeeded")
	}
	t.Logf("write through the isolated member: %v", err)
	// It still serves what it has to its clients.
	waitSerializable(t, c.Endpoints()[lead], "before", "1")

	c.Heal(lead)
	waitSerializable(t, c.Endpoints()[lead], "k", "majority")
}

func TestEtcdClusterRestartEndsIsolation(t *testing.T) {
	c := startTestCluster(t)
	lead, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	f := (lead + 1) % 3
	c.Isolate(f)
	if err := c.Stop(f); err != nil {
		t.Fatal(err)
	}
	// A restarted member is ready only once it reached a quorum.
	if err := c.Restart(f); err != nil {
		t.Fatal(err)
	}
	if err := testPut(testClient(t, c.Endpoints()[f]), "k", "v", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.Heal(f) // a no-op now
	if _, err := c.Leader(); err != nil {
		t.Fatal(err)
	}
}
