package coord_test

import (
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// TestCloseWhileEtcdIsDown: a member waiting in the election (not the
// leader) closes while etcd is gone, before and after its session is lost.
// Close must not wait for etcd to come back: the lease it cannot revoke
// expires on its own.
func TestCloseWhileEtcdIsDown(t *testing.T) {
	for _, lost := range []bool{false, true} {
		name := map[bool]string{false: "session live", true: "session lost"}[lost]
		t.Run(name, func(t *testing.T) {
			e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			kill := sync.OnceFunc(e.Kill) // Kill twice panics
			t.Cleanup(kill)
			counts := map[string]int32{"t": 2}
			endpoints := []string{e.ClientURL()}
			a, _ := join(t, endpoints, testConfig(t, "a", counts))
			waitFor(t, "a leads", 30*time.Second, a.IsLeader)
			cfg := testConfig(t, "b", counts)
			b, bcli := join(t, endpoints, cfg)
			time.Sleep(200 * time.Millisecond) // b campaigns: it waits for a's key to go
			kill()
			if lost {
				waitFor(t, "b's session ends", cfg.SessionTTL+5*time.Second, func() bool { return b.Ctx().Err() != nil })
			}
			closed := make(chan struct{})
			go func() {
				_ = b.Close()
				close(closed)
			}()
			// Close revokes the lease for at most 2 s; anything longer
			// than the TTL and then some is waiting on etcd.
			select {
			case <-closed:
			case <-time.After(cfg.SessionTTL + 10*time.Second):
				_ = bcli.Close() // unblocks what waits on the client, so the test can end
				<-closed
				t.Fatalf("Close did not return with etcd down (waited %s)", cfg.SessionTTL+10*time.Second)
			}
		})
	}
}
