// Package nodekit_test runs the Node.js endpoint kit's own tests and, end
// to end, real `keyshare member --deliver` processes against endpoints
// built with the kit, on embedded etcd and a real Kafka broker.
package nodekit_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keyshare/keyshare/testutil"
)

// requireNode skips t when node is not on PATH.
func requireNode(t testing.TB) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH: the Node.js kit's tests need Node.js 18 or later (https://nodejs.org)")
	}
	return node
}

// keyshare is built from ./cmd/keyshare on first use: a test that skips
// for want of node builds nothing.
var keyshare = testutil.BuildOnFirstUse("../../cmd/keyshare", "keyshare", raceEnabled)

func keyshareBin(t testing.TB) string { return keyshare.Path(t) }

func TestMain(m *testing.M) {
	code := testutil.RunTests(m)
	keyshare.Remove()
	os.Exit(code)
}

// nodeEndpoint is a node process serving one of testdata's endpoints.
type nodeEndpoint struct {
	url string
	cmd *exec.Cmd
	out *testutil.Buffer // what it printed after its first line
}

// startNodeEndpoint runs `node testdata/SCRIPT args...`, waits for its
// "listening on PORT" line and returns its URL. The process is killed
// when the test ends.
func startNodeEndpoint(t testing.TB, script string, args ...string) *nodeEndpoint {
	t.Helper()
	cmd := exec.Command(requireNode(t), append([]string{filepath.Join("testdata", script)}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &testutil.Buffer{}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && out.String() != "" {
			t.Logf("node %s printed:\n%s", script, out.String())
		}
	})
	lines := bufio.NewReader(stdout)
	line, err := lines.ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("node testdata/%s did not start (%v): %q\n%s", script, err, line, out.String())
	}
	go copyLines(out, lines)
	return &nodeEndpoint{url: "http://127.0.0.1:" + port + "/", cmd: cmd, out: out}
}

// startMember runs `keyshare member args...` until the test ends, then
// interrupts it (a graceful leave); its output is logged if t failed.
func startMember(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	var log testutil.Buffer
	cmd := exec.Command(keyshareBin(t), append([]string{"member"}, args...)...)
	cmd.Env = envWithout("KEYSHARE_")
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("member %v printed:\n%s", args, log.String())
		}
	})
	return cmd
}

// envWithout is this process's environment without the variables whose
// names start with prefix: a KEYSHARE_* flag variable of the developer's
// must not reach the members.
func envWithout(prefix string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, prefix) {
			env = append(env, kv)
		}
	}
	return env
}

// owners is who owns the group's ranges, as `keyshare status --json`
// says: the set of owners of active ranges.
func owners(t testing.TB, etcd, group string) map[string]bool {
	t.Helper()
	out, err := exec.Command(keyshareBin(t), "status", "--etcd", etcd, "--group", group, "--json").Output()
	if err != nil {
		return nil // no leader yet, or etcd busy: asked again
	}
	var st struct {
		Partitions []struct {
			Ranges []struct {
				Owner string `json:"owner"`
				State string `json:"state"`
			} `json:"ranges"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("keyshare status --json: %v\n%s", err, out)
	}
	got := map[string]bool{}
	for _, p := range st.Partitions {
		for _, r := range p.Ranges {
			if r.State == "active" {
				got[r.Owner] = true
			}
		}
	}
	return got
}

// copyLines copies r into out a line at a time, until r ends, so that the
// test never reads half a line.
func copyLines(out *testutil.Buffer, r *bufio.Reader) {
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			_, _ = out.Write([]byte(line))
		}
		if err != nil {
			return
		}
	}
}
