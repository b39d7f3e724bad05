package deploy

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestImageRunsTheManifestsMember runs a member in the image's file set,
// as the image's user, with the environment, arguments and secret files
// deploy/kubernetes gives it: the ConfigMap and the container's env, the
// secret files where the Deployment mounts them (as the kubelet writes
// them: 0440, the pod's fsGroup), the system CA bundle trusting the
// endpoint. Only the addresses change, to the test's etcd (with the
// ConfigMap's user and authentication on), broker and HTTPS endpoint,
// named localhost so that glibc's and Go's name lookups run in the file
// set. It checks that every record reaches the endpoint with the bearer
// token, that the probe paths of the manifests and of the chart answer on
// the metrics listener, that the metrics the ScaledObject's query reads
// are exported, and that SIGTERM ends the member well within the grace
// period.
func TestImageRunsTheManifestsMember(t *testing.T) {
	img := assembleImage(t)
	flags := readMemberFlags(t)
	m, err := loadMemberSet(plainMemberObjects(t, true), flags)
	if err != nil {
		t.Fatal(err)
	}
	s := m.effective
	sink := startSink(t, img, "token-for-the-image-test")
	img.writeSecrets(t, m, map[string]string{
		"deliver-token-file": sink.token,
		"etcd-password-file": "password-for-the-image-test",
		"kafka-config":       "client.id=keyshare-image-test\n",
	})
	etcdEndpoint := startAuthEtcd(t, s["prefix"], s["group"], s["etcd-user"], "password-for-the-image-test")
	k := testutil.StartKafka(t, map[string]int32{s["topic"]: 2, s["dlq"]: 2})
	const records = 200
	testutil.Produce(t, k.Brokers, s["topic"], testutil.KeyedRecords(records, 20))

	deliver, err := url.Parse(s["deliver"])
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	env := environ(m.env, map[string]string{
		"KEYSHARE_ETCD":         localhost(t, etcdEndpoint),
		"KEYSHARE_BROKERS":      localhost(t, k.Brokers),
		"KEYSHARE_DELIVER":      "https://" + localhost(t, sink.addr) + deliver.Path,
		"KEYSHARE_METRICS_ADDR": metricsAddr,
	})
	member := startInImage(t, img, env, append([]string{"member"}, m.args...))
	waitOrFail(t, member, fmt.Sprintf("all %d records at the endpoint", records), 60*time.Second,
		func() bool { return sink.count() == records }, sink.status)
	if got := sink.paths(); len(got) != 1 || got[0] != deliver.Path {
		t.Errorf("requests to %v; want %s, the manifests' path", got, deliver.Path)
	}

	chart, err := renderedObjects("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := loadMemberSet(chart, flags)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range append(m.probePaths(), cm.probePaths()...) {
		waitOrFail(t, member, "200 on probe path "+path, 30*time.Second,
			func() bool { return httpStatus(metricsAddr, path) == http.StatusOK },
			func() string { return fmt.Sprintf("last answer %d", httpStatus(metricsAddr, path)) })
	}
	checkScalerMetrics(t, member, metricsAddr, m.scalerQuery(t))
	member.stopWithin(t, m.effective.duration(t, "drain-timeout")+m.effective.duration(t, "ttl"))
}

// sink is the HTTPS endpoint the member delivers to: it checks the
// bearer token and keeps each record's partition and offset.
type sink struct {
	addr, token string
	mu          sync.Mutex
	seen        map[[2]int64]bool
	reqPaths    map[string]bool
	badTokens   int
}

// startSink serves on a free port with a certificate from a new CA, and
// adds that CA to the image's system bundle, as an operator's own CA
// would be (the member is given no --deliver-ca).
func startSink(t *testing.T, img *image, token string) *sink {
	t.Helper()
	ca := testutil.NewCA(t, "sink-ca")
	certFile, keyFile := ca.Issue(t, "sink", true, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := os.OpenFile(filepath.Join(img.root, "etc/ssl/certs/ca-certificates.crt"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("the image's system CA bundle, which an https:// --deliver verifies against: %v", err)
	}
	_, err = bundle.Write(caPEM)
	if cerr := bundle.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &sink{token: token, seen: map[[2]int64]bool{}, reqPaths: map[string]bool{}}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a refused handshake is the member's to report
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s.addr = srv.Listener.Addr().String()
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Records []struct {
			Partition, Offset int64
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqPaths[r.URL.Path] = true
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		s.badTokens++
		http.Error(w, "wrong token", http.StatusUnauthorized)
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rec := range body.Records {
		s.seen[[2]int64{rec.Partition, rec.Offset}] = true
	}
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// status says what the endpoint has seen, for a failure message.
func (s *sink) status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("the endpoint has %d records, and refused %d requests for their token", len(s.seen), s.badTokens)
}

func (s *sink) paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for p := range s.reqPaths {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// writeSecrets writes each secret flag's file where the manifests point
// it, inside the image's file set, as the kubelet writes a secret volume
// with defaultMode 0440 and the pod's fsGroup.
func (img *image) writeSecrets(t *testing.T, m *memberSet, content map[string]string) {
	t.Helper()
	for flag, text := range content {
		p := m.effective[flag]
		if p == "" {
			t.Fatalf("the manifests give no --%s", flag)
		}
		full := filepath.Join(img.root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(text), 0o440); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(full, 0, 65532); err != nil {
			t.Fatal(err)
		}
	}
}
