package deploy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// process is keyshare running in the image's file set, its output kept.
type process struct {
	cmd  *exec.Cmd
	out  *testutil.Buffer
	done chan struct{}
	err  error // Wait's, once done is closed
}

// startInImage starts the image's entrypoint with args; the test's end
// kills it if it still runs.
func startInImage(t *testing.T, img *image, env []string, args []string) *process {
	t.Helper()
	p := &process{cmd: img.command(env, args...), out: &testutil.Buffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// tail is the last lines of the process's output, for a failure message.
func (p *process) tail() string {
	lines := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// waitOrFail polls cond until it holds; it fails the test, with the
// process's output and what status (when not nil) says, when d passes or
// the process ends first.
func waitOrFail(t *testing.T, p *process, what string, d time.Duration, cond func() bool, status func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		state := ""
		if status != nil {
			state = " (" + status() + ")"
		}
		select {
		case <-p.done:
			t.Fatalf("keyshare ended (%v) before %s%s; its output:\n%s", p.err, what, state, p.tail())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s%s; keyshare's output:\n%s", d, what, state, p.tail())
		}
	}
}

// stopWithin sends SIGTERM, as the kubelet does, and fails unless the
// member ends with status 0 before its budget plus shutdownMargin.
func (p *process) stopWithin(t *testing.T, budget time.Duration) {
	t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(budget + shutdownMargin):
		t.Fatalf("the member still runs %v after SIGTERM; its output:\n%s", budget+shutdownMargin, p.tail())
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) || p.err != nil {
		t.Fatalf("the member ended with %v after SIGTERM; want status 0, a graceful leave:\n%s", p.err, p.tail())
	}
	t.Logf("the member left %v after SIGTERM", time.Since(start).Round(time.Millisecond))
}

// startAuthEtcd starts etcd with authentication on and user (password)
// holding read and write on the group's prefix only, as docs/security.md
// sets a member up; it returns the client endpoint.
func startAuthEtcd(t *testing.T, prefix, group, user, password string) string {
	t.Helper()
	cli, e := testutil.StartEtcd(t)
	root := testutil.EnableEtcdAuth(t, cli, "root-password-for-the-image-test")
	testutil.GrantGroupRole(t, root, "keyshare-"+group, strings.TrimSuffix(prefix, "/")+"/"+group+"/", user, password)
	return e.Endpoints[0]
}

// freeAddr is a free loopback host:port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// localhost names 127.0.0.1 in an address or URL as localhost.
func localhost(t *testing.T, addr string) string {
	t.Helper()
	if !strings.Contains(addr, "127.0.0.1:") {
		t.Fatalf("address %q is not on 127.0.0.1", addr)
	}
	return strings.Replace(addr, "127.0.0.1:", "localhost:", 1)
}

// environ is base with overrides, as NAME=VALUE lines.
func environ(base, overrides map[string]string) []string {
	all := map[string]string{}
	for k, v := range base {
		all[k] = v
	}
	for k, v := range overrides {
		all[k] = v
	}
	out := make([]string, 0, len(all))
	for k, v := range all {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func httpStatus(addr, path string) int {
	res, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

var metricName = regexp.MustCompile(`\bkeyshare_[a-z_]+\b`)

// checkScalerMetrics waits until the member's /metrics has every metric
// the ScaledObject's query reads (the leader's backlog series are
// sampled when it is scraped).
func checkScalerMetrics(t *testing.T, p *process, addr, query string) {
	t.Helper()
	names := metricName.FindAllString(query, -1)
	if len(names) == 0 {
		t.Fatalf("the ScaledObject's query reads no keyshare metric: %s", query)
	}
	waitOrFail(t, p, "series of every metric the ScaledObject reads ("+strings.Join(names, ", ")+") on /metrics", 30*time.Second, func() bool {
		body := scrape(addr)
		for _, n := range names {
			if !regexp.MustCompile(`(?m)^` + n + `[{ ]`).MatchString(body) {
				return false
			}
		}
		return true
	}, nil)
}

func scrape(addr string) string {
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}
