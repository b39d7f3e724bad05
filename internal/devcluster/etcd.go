package devcluster

import (
	"fmt"
	"net/url"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// EtcdOptions configures an embedded etcd server.
type EtcdOptions struct {
	// Dir holds the server's data. Required; reuse it to restart with the
	// same data.
	Dir string
	// ClientAddr is the host:port clients connect to. Default
	// "127.0.0.1:0": a free port (read the real one from ClientURL).
	ClientAddr string
	// PeerAddr is the host:port of the raft peer listener. Default
	// "127.0.0.1:0".
	PeerAddr string
	// Logger receives the server's logs. Default: none.
	Logger *zap.Logger
	// StartTimeout bounds the wait for the server to be ready. Default 30 s.
	StartTimeout time.Duration
	// BcryptCost is the bcrypt cost of the users' password hashes when
	// authentication is on (4 to 31). Every authentication computes one.
	// Default etcd's, 10.
	BcryptCost uint
}

// Etcd is a running embedded etcd server.
type Etcd struct {
	*embed.Etcd
	grpc *clientServer
}

// Kill stops the server as a crash would (Close is a graceful stop, which
// keeps serving open streams for up to 7 s).
func (e *Etcd) Kill() { e.grpc.kill(e.Etcd) }

// clientServer captures the gRPC server etcd creates for its clients, so
// that it can be stopped at once. etcd creates it once the server is ready
// and hands it to the config's ServiceRegister from its own goroutine,
// hence the mutex.
type clientServer struct {
	mu sync.Mutex
	s  *grpc.Server
}

func (c *clientServer) capture(cfg *embed.Config) {
	cfg.ServiceRegister = func(s *grpc.Server) {
		c.mu.Lock()
		c.s = s
		c.mu.Unlock()
	}
}

// kill stops e without coordination. embed's Close alone is a graceful
// shutdown: it waits up to its request timeout (7 s) for clients' streams
// (watches, lease keepalives) to end, serving them meanwhile while it
// refuses new requests, and a leader first hands its leadership to a peer,
// which waits as long if that peer is cut off or closing too. So the client
// gRPC server and raft stop first; Close then only cleans up.
func (c *clientServer) kill(e *embed.Etcd) {
	c.mu.Lock()
	s := c.s
	c.s = nil
	c.mu.Unlock()
	if s != nil {
		s.Stop()
	}
	e.Server.HardStop()
	e.Close()
}

// ClientURL is the URL clients connect to, with the real port.
func (e *Etcd) ClientURL() string { return "http://" + e.Clients[0].Addr().String() }

// StartEtcd starts a single-member etcd server and waits until it serves.
func StartEtcd(o EtcdOptions) (*Etcd, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("devcluster: etcd needs a data directory")
	}
	if o.ClientAddr == "" {
		o.ClientAddr = "127.0.0.1:0"
	}
	if o.PeerAddr == "" {
		o.PeerAddr = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 30 * time.Second
	}
	curl, err := url.Parse("http://" + o.ClientAddr)
	if err != nil {
		return nil, fmt.Errorf("devcluster: etcd client address %q: %w", o.ClientAddr, err)
	}
	purl, err := url.Parse("http://" + o.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("devcluster: etcd peer address %q: %w", o.PeerAddr, err)
	}
	cfg := embed.NewConfig()
	cfg.Dir = o.Dir
	cfg.Name = "keyshare"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(o.Logger)
	if o.BcryptCost != 0 {
		cfg.BcryptCost = o.BcryptCost
	}
	cs := &clientServer{}
	cs.capture(cfg)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("devcluster: start etcd on %s: %w (is the port in use? choose another address)", o.ClientAddr, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("devcluster: etcd failed while starting: %w", err)
	case <-time.After(o.StartTimeout):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("devcluster: etcd not ready after %s", o.StartTimeout)
	}
	return &Etcd{Etcd: e, grpc: cs}, nil
}
