package devcluster

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
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
}

// Etcd is a running embedded etcd server.
type Etcd struct {
	*embed.Etcd
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
	return &Etcd{Etcd: e}, nil
}
