package kit_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// TestDeliveryDocExamples runs the two Python endpoints docs/delivery.md
// shows near its top, as printed there but on a free port: the standard
// library one, and the kit's decorated function. A member delivers 100
// records of 10 keys to each; each endpoint must print every record, each
// key's in offset order, and the commit must reach the end.
func TestDeliveryDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../../docs/delivery.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range []struct {
		name, start, listen string
	}{
		{"standard library", "import base64\nimport json\nimport logging\n", `("127.0.0.1", 8080)`},
		{"kit", "import logging\nfrom keyshare_endpoint import endpoint\n", "port=8080"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			code := pythonBlock(t, string(doc), ex.start)
			port := freePort(t)
			if !strings.Contains(code, ex.listen) {
				t.Fatalf("the example does not listen with %s:\n%s", ex.listen, code)
			}
			code = strings.Replace(code, ex.listen, strings.Replace(ex.listen, "8080", port, 1), 1)
			script := filepath.Join(t.TempDir(), "endpoint.py")
			if err := os.WriteFile(script, []byte(code), 0o644); err != nil {
				t.Fatal(err)
			}
			printed := runExample(t, script, port)
			deliverTo(t, "http://127.0.0.1:"+port+"/", 100, 10)
			checkPrinted(t, printed, 100)
		})
	}
}

// pythonBlock is the ```python block of doc that starts with start.
func pythonBlock(t *testing.T, doc, start string) string {
	t.Helper()
	i := strings.Index(doc, "```python\n"+start)
	if i < 0 {
		t.Fatalf("docs/delivery.md has no python block starting %q", start)
	}
	code := doc[i+len("```python\n"):]
	return code[:strings.Index(code, "```")]
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// printedLines collects an example's stdout.
type printedLines struct {
	mu    sync.Mutex
	lines []string
}

func (p *printedLines) get() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// runExample runs script with the machine's python3 (the checkout's kit
// on its path), collecting what it prints and logs, and waits until it
// listens on port.
func runExample(t *testing.T, script, port string) *printedLines {
	t.Helper()
	cmd := exec.Command("python3", script)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(kitDir, "src"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // the examples log there
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &printedLines{}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	testutil.WaitFor(t, "the example listening on "+port, 10*time.Second, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// deliverTo produces n records of keys keys and runs a member delivering
// them to url until the group has committed them all.
func deliverTo(t *testing.T, url string, n, keys int) {
	t.Helper()
	bin := keyshareBin(t)
	_, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{topic: 1})
	testutil.Produce(t, k.Brokers, topic, testutil.KeyedRecords(n, keys))
	cmd := exec.Command(bin, "member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", group, "--topic", topic,
		"--id", "a", "--deliver", url, "--batch-size", "4", "--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() })
	testutil.WaitFor(t, "the commit past every record", 60*time.Second, func() bool {
		c, err := testutil.ReadCommitted(k.Brokers, group, topic, 1)
		return err == nil && c[0] == int64(n)
	})
}

// checkPrinted: every record "key-K:SEQ" printed once, each key's in order.
func checkPrinted(t *testing.T, p *printedLines, n int) {
	t.Helper()
	next := map[string]int{}
	count := 0
	for _, l := range p.get() {
		i := strings.LastIndex(l, "key-") // the value's: b'key-3' b'key-3:0'; request log lines have none
		if i < 0 {
			continue
		}
		var k, seq int
		if _, err := fmt.Sscanf(l[i:], "key-%d:%d", &k, &seq); err != nil {
			continue
		}
		key := fmt.Sprint(k)
		if seq != next[key] {
			t.Errorf("key-%s: printed seq %d where %d was next: %q", key, seq, next[key], l)
		}
		next[key] = seq + 1
		count++
	}
	if count != n {
		t.Errorf("%d records printed, want %d:\n%s", count, n, strings.Join(p.get(), "\n"))
	}
}
