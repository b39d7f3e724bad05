package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// CA is a certificate authority made for one test.
type CA struct {
	CertFile string // PEM
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

// NewCA makes a self-signed CA in a temporary directory.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.CertFile = writePEM(t, ca.dir, name+".crt", "CERTIFICATE", der)
	return ca
}

// Issue signs a certificate for name valid from notBefore to notAfter; a
// server certificate names 127.0.0.1 and localhost. It returns the PEM
// certificate and key files.
func (ca *CA) Issue(t testing.TB, name string, server bool, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, ca.dir, name+".crt", "CERTIFICATE", der), writePEM(t, ca.dir, name+".key", "PRIVATE KEY", kb)
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// SecureEtcd is an embedded etcd that serves clients over TLS and requires
// a client certificate signed by CA.
type SecureEtcd struct {
	Endpoint              string // https://127.0.0.1:port
	CA                    *CA
	ClientCert, ClientKey string // a valid client certificate (CN "keyshare")
	*embed.Etcd
}

// StartEtcdTLS starts an embedded etcd on a free port that serves clients
// over TLS with a server certificate for 127.0.0.1 from a fresh CA, and
// requires client certificates from that CA. It is closed when the test ends.
func StartEtcdTLS(t testing.TB) *SecureEtcd {
	t.Helper()
	ca := NewCA(t, "keyshare-test-ca")
	now := time.Now()
	srvCert, srvKey := ca.Issue(t, "etcd-server", true, now.Add(-time.Hour), now.Add(24*time.Hour))
	cliCert, cliKey := ca.Issue(t, "keyshare", false, now.Add(-time.Hour), now.Add(24*time.Hour))
	curl, _ := url.Parse("https://127.0.0.1:0")
	purl, _ := url.Parse("http://127.0.0.1:0")
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.Name = "keyshare"
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*curl}, []url.URL{*curl}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*purl}, []url.URL{*purl}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ClientTLSInfo = transport.TLSInfo{CertFile: srvCert, KeyFile: srvKey, TrustedCAFile: ca.CertFile, ClientCertAuth: true}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd with TLS: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd with TLS: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd with TLS not ready after 30s")
	}
	return &SecureEtcd{Endpoint: "https://" + e.Clients[0].Addr().String(), CA: ca, ClientCert: cliCert, ClientKey: cliKey, Etcd: e}
}

// Client returns a client with the valid client certificate.
func (s *SecureEtcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	tc, err := transport.TLSInfo{CertFile: s.ClientCert, KeyFile: s.ClientKey, TrustedCAFile: s.CA.CertFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint}, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// EnableEtcdAuth turns on authentication with a root user (password
// rootPassword) through cli, and returns a client logged in as root.
func EnableEtcdAuth(t testing.TB, cli *clientv3.Client, rootPassword string) *clientv3.Client {
	t.Helper()
	ctx := t.Context()
	if _, err := cli.UserAdd(ctx, "root", rootPassword); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		t.Fatal(err)
	}
	root, err := clientv3.New(clientv3.Config{Endpoints: cli.Endpoints(), Username: "root", Password: rootPassword, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	return root
}

// GrantGroupRole makes role with readwrite on prefix and a user holding it.
func GrantGroupRole(t testing.TB, root *clientv3.Client, role, prefix, user, password string) {
	t.Helper()
	ctx := t.Context()
	if _, err := root.RoleAdd(ctx, role); err != nil {
		t.Fatal(err)
	}
	if _, err := root.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserAdd(ctx, user, password); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, user, role); err != nil {
		t.Fatal(err)
	}
}
