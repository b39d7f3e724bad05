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
	var res coordResult
	group := fmt.Sprintf("co-%d-%d-%d", p, m, c.groups.Add(1))
	topics := topicsFor("t", p)
	keys := schema.Group{Prefix: "", Name: group}.Keys()
	var names []string
	for t := range topics {
		names = append(names, t)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := observeRanges(octx, cli, keys)
	if err != nil {
		return res, err
	}
	clients := make([]*clientv3.Client, 0, 10)
	defer func() {
		for _, k := range clients {
			k.Close()
		}
	}()
	newClient := func() (*clientv3.Client, error) {
		k, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(), MaxCallRecvMsgSize: 256 << 20})
		if err == nil {
			clients = append(clients, k)
		}
		return k, err
	}
	shared := make([]*clientv3.Client, 0, 8)
	for range min(8, m) {
		k, err := newClient()
		if err != nil {
			return res, err
		}
		shared = append(shared, k)
	}
	type sess struct {
		s    *coord.Session
		stop context.CancelFunc
		done chan struct{}
	}
	var sessions []*sess
	// lostSessions says how many sessions have ended as lost (a lease
	// deadline passed, or etcd said the lease was gone), for a failure.
	lostSessions := func() string {
		lost := 0
		for _, s := range sessions {
			if errors.Is(context.Cause(s.s.Ctx()), coord.ErrSessionLost) {
				lost++
			}
		}
		return fmt.Sprintf("%d of %d sessions lost", lost, len(sessions))
	}
	defer func() {
		for _, s := range sessions {
			s.stop()
			<-s.done
			_ = s.s.Close()
		}
	}()
	join := func(i int, k *clientv3.Client) (*sess, error) {
		cfg := coord.DefaultConfig()
		cfg.Group, cfg.MemberID, cfg.Topics = group, fmt.Sprintf("m%03d", i), names
		cfg.Partitions = func(context.Context, []string) (map[string]int32, error) { return topics, nil }
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
		ss := &sess{s: s, stop: stop, done: make(chan struct{})}
		// A coordination-only member releases what it is asked to give
		// up at once (nothing in flight), with the state it was given.
		go func() {
			defer close(ss.done)
			for {
				select {
				case <-sctx.Done():
					return
				case a := <-s.Updates():
					var rels []coord.RangeRelease
					for _, r := range a.Ranges {
						if r.Record.State == schema.StateRevoking {
							rels = append(rels, coord.RangeRelease{Range: r, Final: r.Entry, Written: r.EntryRev > 0})
						}
					}
					if len(rels) > 0 {
						rctx, cancel := context.WithTimeout(sctx, 10*time.Second)
						_ = s.ReleaseRanges(rctx, rels)
						cancel()
					}
				}
			}
		}()
		return ss, nil
	}
	start := time.Now()
	for i := range m {
		k := shared[i%len(shared)]
		if i == m-1 {
			var err error
			if k, err = newClient(); err != nil { // the crash victim's own client
				return res, err
			}
		}
		s, err := join(i, k)
		if err != nil {
			return res, err
		}
		sessions = append(sessions, s)
	}
	res.settle = -1
	settleLimit := 5 * time.Minute
	if m > 64 {
		settleLimit = 2 * time.Minute
	}
	if _, err := waitUntil(ctx, settleLimit, 100*time.Millisecond, func() bool { return settledFor(obs.snapshot(), topics, "") }); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: settle: %w (%s)", p, m, err, lostSessions())
	}
	res.settle = time.Since(start)
	r0, _, _ := etcdState(ctx, cli, keys.Root())
	t0 := time.Now()
	worksleep.Sleep(ctx, 3*time.Second)
	r1, nkeys, db := etcdState(ctx, cli, keys.Root())
	res.idleWrites = float64(r1-r0) / time.Since(t0).Seconds()
	res.keys, res.db = nkeys, db

	// Graceful leave of a non-leader.
	leaver := sessions[1]
	if leaver.s.IsLeader() {
		leaver = sessions[0]
	}
	start = time.Now()
	if err := leaver.s.Leave(ctx); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: leave: %w (%s)", p, m, err, lostSessions())
	}
	if _, err := waitUntil(ctx, 5*time.Minute, 100*time.Millisecond, func() bool { return settledFor(obs.snapshot(), topics, leaver.s.ID()) }); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: leave: %w", p, m, err)
	}
	res.leave = time.Since(start)
	if m < 3 {
		res.crash = -1
		return res, nil
	}
	// Crash: the last member's client goes away without revoking its lease.
	victim := sessions[len(sessions)-1]
	if victim.s.IsLeader() {
		res.crash = -1
		return res, nil
	}
	start = time.Now()
	clients[len(clients)-1].Close()
	if _, err := waitUntil(ctx, 5*time.Minute, 100*time.Millisecond, func() bool { return settledFor(obs.snapshot(), topics, victim.s.ID()) }); err != nil {
		//lint:ignore ST1005 P and M are the benchmark's parameter names
		return res, fmt.Errorf("P=%d M=%d: crash: %w", p, m, err)
	}
	res.crash = time.Since(start)
	return res, nil
}
