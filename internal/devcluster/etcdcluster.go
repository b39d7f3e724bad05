package devcluster

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// leaderWait bounds how long Leader waits for an election. etcd's election
// timeout is 1 s, randomized up to 2 s, and a split pre-vote costs another
// round; 5 s covers two rounds with room for a slow, -race machine.
const leaderWait = 5 * time.Second

// EtcdClusterOptions configures an embedded multi-member etcd cluster.
type EtcdClusterOptions struct {
	// Dir holds the members' data: member i keeps its data in Dir/m<i>.
	// Required; the member directories must not hold etcd data yet (a new
	// cluster gets new ports, which old data would not know).
	Dir string
	// Size is the number of members. Default 3.
	Size int
	// Logger receives the servers' logs. Default: none.
	Logger *zap.Logger
	// StartTimeout bounds the wait for the cluster, or a restarted member,
	// to be ready. Default 30 s.
	StartTimeout time.Duration
}

// EtcdCluster is a running multi-member etcd cluster, all in this process,
// for fault-injection tests: members can be stopped, restarted and cut off
// from each other. Heartbeat and election timeouts are etcd's defaults
// (100 ms and 1 s), so that failovers take as long as in production.
// Its methods are safe for concurrent use.
type EtcdCluster struct {
	o         EtcdClusterOptions
	token     string
	initial   string // the InitialCluster, "m0=http://...,m1=..."
	endpoints []string

	mu      sync.Mutex
	members []*member
	closed  bool
}

type member struct {
	name, dir    string
	client, peer url.URL
	// id is the raft ID etcd derives from the peer URLs and the cluster
	// token; it survives Restart. CutPeer names peers by it.
	id       types.ID
	etcd     *embed.Etcd // nil while stopped
	isolated bool
	grpc     clientServer
}

// StartEtcdCluster starts o.Size members on free ports and waits until
// every one of them serves.
func StartEtcdCluster(o EtcdClusterOptions) (*EtcdCluster, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("devcluster: etcd cluster needs a data directory")
	}
	if o.Size == 0 {
		o.Size = 3
	}
	if o.Size < 1 {
		return nil, fmt.Errorf("devcluster: etcd cluster size %d must be positive", o.Size)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	for i := range o.Size {
		dir := filepath.Join(o.Dir, fmt.Sprintf("m%d", i))
		if _, err := os.Stat(filepath.Join(dir, "member")); err == nil {
			return nil, fmt.Errorf("devcluster: %s already holds etcd data; start the cluster in an empty directory", dir)
		}
	}
	c, err := startEtcdCluster(o)
	if isAddrInUse(err) {
		// Another process took one of the ports between freePorts and the
		// listen. Remove the data the failed attempt wrote (there was none
		// before) and try once more on fresh ports.
		for i := range o.Size {
			os.RemoveAll(filepath.Join(o.Dir, fmt.Sprintf("m%d", i), "member"))
		}
		c, err = startEtcdCluster(o)
	}
	return c, err
}

func startEtcdCluster(o EtcdClusterOptions) (*EtcdCluster, error) {
	ports, err := freePorts(2 * o.Size)
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{
		o: o,
		// A token unique to this cluster, so that a member of an earlier
		// cluster that used the same ports is rejected, not joined.
		token: fmt.Sprintf("keyshare-devcluster-%016x", rand.Uint64()),
	}
	var initial []string
	for i := range o.Size {
		m := &member{
			name:   fmt.Sprintf("m%d", i),
			dir:    filepath.Join(o.Dir, fmt.Sprintf("m%d", i)),
			client: url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])},
			peer:   url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])},
		}
		c.members = append(c.members, m)
		c.endpoints = append(c.endpoints, m.client.String())
		initial = append(initial, m.name+"="+m.peer.String())
	}
	c.initial = strings.Join(initial, ",")

	// embed.StartEtcd returns before the member has a quorum, so the
	// members start one after another and are waited for together after.
	// One after another is quicker: a new member first asks its peers
	// whether it already joined, and a peer that listens but does not
	// serve yet (one starting in parallel) holds each question for its
	// full 1 s timeout; one that does not listen yet refuses at once.
	for i, m := range c.members {
		if m.etcd, err = embed.StartEtcd(c.config(m)); err != nil {
			c.closeAll()
			return nil, fmt.Errorf("devcluster: start etcd member %d on %s: %w", i, m.client.Host, err)
		}
	}
	timeout := time.After(o.StartTimeout)
	for i, m := range c.members {
		if err := waitReady(m.etcd, timeout); err != nil {
			c.closeAll()
			return nil, fmt.Errorf("devcluster: etcd member %d: %w", i, err)
		}
		m.id = m.etcd.Server.MemberID()
	}
	return c, nil
}

// config is member m's configuration, the same at every start: on a
// restart etcd finds the WAL in m.dir and ignores InitialCluster, token and
// "new" cluster state, rejoining as the member it was.
func (c *EtcdCluster) config(m *member) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{m.client}, []url.URL{m.client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{m.peer}, []url.URL{m.peer}
	cfg.InitialCluster = c.initial
	cfg.InitialClusterToken = c.token
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.o.Logger)
	m.grpc.capture(cfg)
	return cfg
}

// Endpoints returns the members' client URLs, in member order. They do not
// change for the cluster's life, also across Restart.
func (c *EtcdCluster) Endpoints() []string {
	return append([]string(nil), c.endpoints...)
}

// Leader returns the index of the raft leader, waiting up to 5 s for one
// to be elected. It counts only running members that Isolate has not cut
// off: the leader is the one a quorum of them follows, so a member that is
// cut off and still believes it leads (until it notices, after an election
// timeout) is not reported.
func (c *EtcdCluster) Leader() (int, error) {
	deadline := time.Now().Add(leaderWait)
	for {
		c.mu.Lock()
		i := c.leader()
		c.mu.Unlock()
		if i >= 0 {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, fmt.Errorf("devcluster: no etcd leader after %s; a leader needs %d of the %d members running and not isolated",
				leaderWait, len(c.members)/2+1, len(c.members))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leader returns the index of the member that a quorum of the connected
// members follows, or -1. c.mu must be held. A member's id is 0 (raft's
// "none") until it first served.
func (c *EtcdCluster) leader() int {
	votes := map[types.ID]int{}
	for _, m := range c.members {
		if m.etcd != nil && !m.isolated {
			votes[m.etcd.Server.Leader()]++
		}
	}
	for i, m := range c.members {
		if m.etcd != nil && !m.isolated && m.id != 0 && votes[m.id] >= len(c.members)/2+1 {
			return i
		}
	}
	return -1
}

// Stop stops member i as a crash would: its clients' connections drop at
// once and a leader hands nothing over, so the others elect a new leader
// after an election timeout. Unlike a crash it loses no data, which etcd
// syncs before it acknowledges anyway. The member's addresses are kept for
// Restart. Stopping a stopped member is an error.
func (c *EtcdCluster) Stop(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(i)
	if err != nil {
		return err
	}
	if m.etcd == nil {
		return fmt.Errorf("devcluster: etcd member %d is already stopped", i)
	}
	m.kill()
	return nil
}

// Restart starts stopped member i again from its data directory on its
// old client and peer addresses, and waits until it serves (which needs a
// quorum; the cluster's other methods wait meanwhile). A restarted member
// is no longer isolated: its new transport starts connected, and Restart
// mends the other side too. It stays cut off from members that are still
// isolated.
func (c *EtcdCluster) Restart(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, err := c.member(i)
	if err != nil {
		return err
	}
	if m.etcd != nil {
		return fmt.Errorf("devcluster: etcd member %d is running; Stop it before Restart", i)
	}
	// With its WAL, etcd rejoins as the member it was ("existing" cluster
	// state); without, it would try to bootstrap a new member.
	if _, err := os.Stat(filepath.Join(m.dir, "member", "wal")); err != nil {
		return fmt.Errorf("devcluster: etcd member %d has no data to restart from: %w", i, err)
	}
	e, err := embed.StartEtcd(c.config(m))
	if isAddrInUse(err) {
		// The port was free when Stop closed it; something took it since,
		// perhaps only for a moment.
		time.Sleep(200 * time.Millisecond)
		e, err = embed.StartEtcd(c.config(m))
	}
	if err != nil {
		return fmt.Errorf("devcluster: restart etcd member %d on %s from %s: %w", i, m.client.Host, m.dir, err)
	}
	m.etcd, m.isolated = e, false
	// Before it has a chance to talk much: cut the new transport off from
	// isolated members, and mend the others' side towards it.
	for j, p := range c.members {
		if j == i || p.etcd == nil {
			continue
		}
		if p.isolated {
			e.Server.CutPeer(p.id)
		} else {
			p.etcd.Server.MendPeer(m.id)
		}
	}
	if err := waitReady(e, time.After(c.o.StartTimeout)); err != nil {
		m.kill()
		return fmt.Errorf("devcluster: etcd member %d: %w", i, err)
	}
	return nil
}

// Isolate cuts raft traffic between member i and every other member, both
// ways, as a network partition would. Member i still serves clients on its
// endpoint, but cannot commit. Isolating a stopped member does nothing:
// Restart would end the isolation anyway.
func (c *EtcdCluster) Isolate(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.mustMember(i)
	if m.etcd == nil {
		return
	}
	m.isolated = true
	for j, p := range c.members {
		if j == i {
			continue
		}
		m.etcd.Server.CutPeer(p.id)
		if p.etcd != nil {
			p.etcd.Server.CutPeer(m.id)
		}
	}
}

// Heal undoes Isolate(i), except towards members that are still isolated.
// Healing a member that is not isolated does nothing.
func (c *EtcdCluster) Heal(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.mustMember(i)
	if !m.isolated {
		return
	}
	m.isolated = false
	for j, p := range c.members {
		if j == i || p.isolated {
			continue
		}
		if m.etcd != nil {
			m.etcd.Server.MendPeer(p.id)
		}
		if p.etcd != nil {
			p.etcd.Server.MendPeer(m.id)
		}
	}
}

// Close closes all running members. It is safe to call more than once;
// after it, Stop and Restart return errors.
func (c *EtcdCluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.closeAll()
}

// closeAll stops the running members, all at once: each takes a second to
// give up its peers' connections.
func (c *EtcdCluster) closeAll() {
	var wg sync.WaitGroup
	for _, m := range c.members {
		if m.etcd != nil {
			wg.Go(m.kill)
		}
	}
	wg.Wait()
}

// kill stops running member m as a crash would (see clientServer.kill).
func (m *member) kill() {
	m.grpc.kill(m.etcd)
	m.etcd = nil
}

func (c *EtcdCluster) member(i int) (*member, error) {
	if c.closed {
		return nil, fmt.Errorf("devcluster: etcd cluster is closed")
	}
	if i < 0 || i >= len(c.members) {
		return nil, fmt.Errorf("devcluster: no etcd member %d; the cluster has members 0 to %d", i, len(c.members)-1)
	}
	return c.members[i], nil
}

// mustMember is member for Isolate and Heal, which return no error: a bad
// index is a bug in the test.
func (c *EtcdCluster) mustMember(i int) *member {
	if i < 0 || i >= len(c.members) {
		panic(fmt.Sprintf("devcluster: no etcd member %d; the cluster has members 0 to %d", i, len(c.members)-1))
	}
	return c.members[i]
}

// waitReady waits until e serves clients, it fails, or timeout fires.
func waitReady(e *embed.Etcd, timeout <-chan time.Time) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("failed while starting: %w", err)
	case <-timeout:
		return fmt.Errorf("not ready in time; is a quorum of members running?")
	}
}

// freePorts returns n distinct free ports on 127.0.0.1. etcd needs every
// member's peer URL before any member starts, so the ports are found by
// listening on port 0 and then closed again; all n listeners are open at
// once so that the ports differ.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("devcluster: find a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func isAddrInUse(err error) bool {
	// embed does not always wrap the listener's error with %w.
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}
