package coord_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/testutil"
)

// TestCloseWhileEtcdIsDown: the leader and a member waiting in the
// election close while etcd is gone, before and after their sessions are
// lost. Close must not wait for etcd to come back: the leases it cannot
// revoke expire on their own.
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
			cfg := testConfig(t, "a", counts)
			a, acli := join(t, endpoints, cfg)
			waitFor(t, "a leads", 30*time.Second, a.IsLeader)
			b, bcli := join(t, endpoints, testConfig(t, "b", counts))
			time.Sleep(200 * time.Millisecond) // b campaigns: it waits for a's key to go
			kill()
			if lost {
				waitFor(t, "the sessions end", cfg.SessionTTL+5*time.Second, func() bool { return a.Ctx().Err() != nil && b.Ctx().Err() != nil })
			}
			closed := make(chan struct{})
			go func() {
				var wg sync.WaitGroup
				wg.Go(func() { _ = a.Close() })
				wg.Go(func() { _ = b.Close() })
				wg.Wait()
				close(closed)
			}()
			// Close revokes the lease for at most 2 s; anything longer
			// than the TTL and then some is waiting on etcd.
			select {
			case <-closed:
			case <-time.After(cfg.SessionTTL + 10*time.Second):
				_, _ = acli.Close(), bcli.Close() // unblocks what waits on the clients, so the test can end
				<-closed
				t.Fatalf("Close did not return with etcd down (waited %s)", cfg.SessionTTL+10*time.Second)
			}
		})
	}
}

// TestJoinRefusesOtherTopics: a member whose topics differ from those of
// the group's live members is refused before it writes anything, with an
// error naming both lists; the same topics in another order are the same.
func TestJoinRefusesOtherTopics(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	join(t, e.Endpoints, testConfig(t, "a", map[string]int32{"orders": 1, "payments": 1}))

	cfg := testConfig(t, "b", map[string]int32{"events": 1})
	_, err := coord.Join(t.Context(), testutil.NewEtcdClient(t, e.Endpoints), cfg)
	var te *coord.TopicsDifferError
	if !errors.As(err, &te) {
		t.Fatalf("join with other topics: %v, want a *coord.TopicsDifferError", err)
	}
	for _, want := range []string{"[events]", "[orders payments]", `"a"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if resp, err := cli.Get(t.Context(), "/keyshare/g/members/b"); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("refused member registered: %v %v", resp, err)
	}

	cfg = testConfig(t, "c", nil)
	cfg.Topics = []string{"payments", "orders", "orders"}
	cfg.Partitions = static(map[string]int32{"orders": 1, "payments": 1})
	join(t, e.Endpoints, cfg)

	// Members that join at once with different topics: the first
	// registered decides, the others are refused.
	counts := []map[string]int32{{"x": 1}, {"y": 1}}
	var mu sync.Mutex
	joined := map[string]int{} // topic → members that joined with it
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			cfg := testConfig(t, fmt.Sprintf("m%d", i), counts[i%2])
			cfg.Group = "h"
			s, err := coord.Join(t.Context(), testutil.NewEtcdClient(t, e.Endpoints), cfg)
			if err != nil {
				if te := (*coord.TopicsDifferError)(nil); !errors.As(err, &te) {
					t.Errorf("join %s: %v", cfg.MemberID, err)
				}
				return
			}
			t.Cleanup(func() { _ = s.Close() })
			mu.Lock()
			joined[cfg.Topics[0]]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(joined) != 1 {
		t.Fatalf("members joined group h with different topics: %v", joined)
	}
}
