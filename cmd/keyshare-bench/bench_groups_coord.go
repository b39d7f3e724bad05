package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

// coordResult is a row of the coordination-only table (largeGroups): how
// long the group took to settle, after a graceful leave and after a
// crash, its idle etcd writes a second, and its keys and etcd's size.
type coordResult struct {
	settle, leave, crash time.Duration
	idleWrites           float64
	keys, db             int64
}

// coordOnly runs m coord sessions (no Kafka) over p partitions and
// measures a coordResult.
func (c *benchCommand) coordOnly(ctx context.Context, endpoints []string, cli *clientv3.Client, p, m int) (coordResult, error) {
	res := coordResult{settle: -1}
	g := &coordGroup{
		endpoints: endpoints,
		group:     fmt.Sprintf("co-%d-%d-%d", p, m, c.groups.Add(1)),
		topics:    topicsFor("t", p),
	}
	for t := range g.topics {
		g.names = append(g.names, t)
	}
	keys := schema.Group{Prefix: "", Name: g.group}.Keys()
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	var err error
	if g.obs, err = observeRanges(octx, cli, keys); err != nil {
		return res, err
	}
	defer g.close()
	start := time.Now()
	if err := g.joinAll(ctx, m); err != nil {
		return res, err
	}
	settleLimit := 5 * time.Minute
	if m > 64 {
		settleLimit = 2 * time.Minute
	}
	if _, err := waitUntil(ctx, settleLimit, 100*time.Millisecond, g.settledWithout("")); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: settle: %w (%s)", p, m, err, g.lostSessions())
	}
	res.settle = time.Since(start)
	r0, _, _ := etcdState(ctx, cli, keys.Root())
	t0 := time.Now()
	worksleep.Sleep(ctx, 3*time.Second)
	r1, nkeys, db := etcdState(ctx, cli, keys.Root())
	res.idleWrites = float64(r1-r0) / time.Since(t0).Seconds()
	res.keys, res.db = nkeys, db

	if res.leave, err = g.timeLeave(ctx); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: leave: %w", p, m, err)
	}
	if res.crash, err = g.timeCrash(ctx); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: crash: %w", p, m, err)
	}
	return res, nil
}

// coordGroup is the coord sessions of one coordOnly run and their etcd
// clients.
type coordGroup struct {
	endpoints []string
	group     string
	topics    map[string]int32
	names     []string // the topics, in the order every member is given them
	obs       *rangeObserver
	clients   []*clientv3.Client // every client, to close; the last is the crash victim's
	sessions  []*coordSession
}

// coordSession is one coordination-only member.
type coordSession struct {
	s    *coord.Session
	stop context.CancelFunc
	done chan struct{} // closed when its release loop has returned
}

func (g *coordGroup) newClient() (*clientv3.Client, error) {
	k, err := clientv3.New(clientv3.Config{Endpoints: g.endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallRecvMsgSize: 256 << 20})
	if err == nil {
		g.clients = append(g.clients, k)
	}
	return k, err
}

// close stops every session, then closes every client.
func (g *coordGroup) close() {
	for _, s := range g.sessions {
		s.stop()
		<-s.done
		_ = s.s.Close()
	}
	for _, k := range g.clients {
		k.Close()
	}
}

// lostSessions says how many sessions have ended as lost (a lease
// deadline passed, or etcd said the lease was gone), for a failure.
func (g *coordGroup) lostSessions() string {
	lost := 0
	for _, s := range g.sessions {
		if errors.Is(context.Cause(s.s.Ctx()), coord.ErrSessionLost) {
			lost++
		}
	}
	return fmt.Sprintf("%d of %d sessions lost", lost, len(g.sessions))
}

// settledWithout is a condition: every partition is held by active ranges
// of members other than gone.
func (g *coordGroup) settledWithout(gone string) func() bool {
	return func() bool { return settledFor(g.obs.snapshot(), g.topics, gone) }
}

// joinAll joins m sessions over up to eight shared clients; the last
// member, the crash victim, has a client of its own.
func (g *coordGroup) joinAll(ctx context.Context, m int) error {
	shared := make([]*clientv3.Client, 0, 8)
	for range min(8, m) {
		k, err := g.newClient()
		if err != nil {
			return err
		}
		shared = append(shared, k)
	}
	for i := range m {
		k := shared[i%len(shared)]
		if i == m-1 {
			var err error
			if k, err = g.newClient(); err != nil {
				return err
			}
		}
		s, err := g.join(ctx, i, k)
		if err != nil {
			return err
		}
		g.sessions = append(g.sessions, s)
	}
	return nil
}

// join joins member i over client k and starts its release loop.
func (g *coordGroup) join(ctx context.Context, i int, k *clientv3.Client) (*coordSession, error) {
	cfg := coord.DefaultConfig()
	cfg.Group, cfg.MemberID, cfg.Topics = g.group, fmt.Sprintf("m%03d", i), g.names
	cfg.Partitions = func(context.Context, []string) (map[string]int32, error) { return g.topics, nil }
	// The default TTL: 200 leases of 2 s on two loaded cores lose
	// sessions to late keepalives.
	cfg.SessionTTL, cfg.DrainTimeout, cfg.RebalanceDebounce = 10*time.Second, 10*time.Second, 100*time.Millisecond
	if lvl := os.Getenv("KEYSHARE_BENCH_COORD_LOG"); lvl != "" {
		// The sessions' own log (on the bench's stderr), to see where
		// a figure's time goes.
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: cfg.MemberID, Level: hclog.LevelFromString(lvl), Output: os.Stderr})
	}
	s, err := coord.Join(ctx, k, cfg)
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(s.Ctx())
	ss := &coordSession{s: s, stop: stop, done: make(chan struct{})}
	go ss.releaseRevoked(sctx)
	return ss, nil
}

// releaseRevoked releases what the member is asked to give up at once (a
// coordination-only member has nothing in flight), with the state it was
// given, until ctx ends.
func (ss *coordSession) releaseRevoked(ctx context.Context) {
	defer close(ss.done)
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-ss.s.Updates():
			var rels []coord.RangeRelease
			for _, r := range a.Ranges {
				if r.Record.State == schema.StateRevoking {
					rels = append(rels, coord.RangeRelease{Range: r, Final: r.Entry, Written: r.EntryRev > 0})
				}
			}
			if len(rels) > 0 {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = ss.s.ReleaseRanges(rctx, rels)
				cancel()
			}
		}
	}
}

// timeLeave times a graceful leave of a non-leader until the others hold
// every partition.
func (g *coordGroup) timeLeave(ctx context.Context) (time.Duration, error) {
	leaver := g.sessions[1]
	if leaver.s.IsLeader() {
		leaver = g.sessions[0]
	}
	start := time.Now()
	if err := leaver.s.Leave(ctx); err != nil {
		return 0, fmt.Errorf("%w (%s)", err, g.lostSessions())
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 100*time.Millisecond, g.settledWithout(leaver.s.ID())); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// timeCrash times a crash, the last member's client going away without
// revoking its lease, until the others hold every partition; -1 with
// fewer than three members or when the victim leads.
func (g *coordGroup) timeCrash(ctx context.Context) (time.Duration, error) {
	victim := g.sessions[len(g.sessions)-1]
	if len(g.sessions) < 3 || victim.s.IsLeader() {
		return -1, nil
	}
	start := time.Now()
	g.clients[len(g.clients)-1].Close()
	if _, err := waitUntil(ctx, 5*time.Minute, 100*time.Millisecond, g.settledWithout(victim.s.ID())); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}
