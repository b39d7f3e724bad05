package testutil

import (
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// EtcdServer is the embedded etcd server (an alias, so that code outside
// this module can name it).
type EtcdServer = devcluster.Etcd

// Etcd is an embedded etcd server started for one test.
type Etcd struct {
	*EtcdServer
	Endpoints []string
}

// etcdTestBcryptCost is bcrypt's least cost, for the password hashes of
// test servers with authentication on: at etcd's default, 10, each
// authentication takes about 3 s under the race detector, and a test that
// starts members and commands as an etcd user authenticates many times.
const etcdTestBcryptCost = 4

// StartEtcd starts an embedded etcd server on free ports in a temporary
// directory and returns a client connected to it. Both are closed when the
// test ends.
func StartEtcd(t testing.TB) (*clientv3.Client, *Etcd) {
	t.Helper()
	e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: t.TempDir(), Logger: zap.NewNop(), BcryptCost: etcdTestBcryptCost})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(e.Close)
	te := &Etcd{EtcdServer: e, Endpoints: []string{e.ClientURL()}}
	return NewEtcdClient(t, te.Endpoints), te
}

// NewEtcdClient returns a client for the given endpoints, closed when the test
// ends. Tests use one client per simulated process, so that closing one
// member's client does not affect another's.
func NewEtcdClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}
