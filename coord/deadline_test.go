package coord_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/internal/devcluster"
)

// TestDeadlineStopsWorkBeforeLeaseCanExpire: while etcd answers, the
// member's deadline moves forward and never lies beyond now + TTL − margin;
// once etcd is gone, no answered keepalive can have been sent after the
// kill, so the deadline is at most kill + TTL − margin, Live turns false
// there, and the session ends as lost.
func TestDeadlineStopsWorkBeforeLeaseCanExpire(t *testing.T) {
	e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "m1", map[string]int32{"t": 1})
	margin := 300 * time.Millisecond
	cfg.DeadlineMargin = margin
	s, _ := join(t, []string{e.ClientURL()}, cfg)
	d0 := s.Deadline()
	time.Sleep(time.Second)
	d1 := s.Deadline()
	if !d1.After(d0) {
		t.Errorf("deadline did not move while etcd answered: %s then %s", d0, d1)
	}
	if limit := time.Now().Add(cfg.SessionTTL - margin); d1.After(limit) {
		t.Errorf("deadline %s beyond now + TTL − margin %s", d1, limit)
	}
	if !s.Live() {
		t.Error("not live while etcd answers")
	}
	// The kill is done when Kill returns: a keepalive sent just before
	// that may still be answered, so the clock is read after it, and the
	// deadline once the session has ended (no answer can extend it then).
	e.Kill()
	killed := time.Now()
	select {
	case <-s.Ctx().Done():
	case <-time.After(cfg.SessionTTL + 5*time.Second):
		t.Fatal("session did not end after etcd was killed")
	}
	d := s.Deadline()
	if limit := killed.Add(cfg.SessionTTL - margin); d.After(limit) {
		t.Errorf("deadline %s after kill + TTL − margin %s", d, limit)
	}
	// etcd's client may end the session a little before the deadline (it
	// counts the TTL from its last answer, on a 500 ms tick): earlier is
	// the safe side. What must hold is that nothing is live past it.
	time.Sleep(time.Until(d))
	if s.Live() {
		t.Error("live after the deadline")
	}
	if !errors.Is(context.Cause(s.Ctx()), coord.ErrSessionLost) {
		t.Errorf("session ended with %v, want ErrSessionLost", context.Cause(s.Ctx()))
	}
}
