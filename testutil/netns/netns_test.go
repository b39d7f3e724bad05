package netns

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCutOneDestination: a host reaches two services; cutting one leaves
// the other reachable; healing restores it; cleanup removes the namespace.
func TestCutOneDestination(t *testing.T) {
	n := New(t)
	a, b := n.ServiceIP(), n.ServiceIP()
	la, err := net.Listen("tcp", a+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	lb, err := net.Listen("tcp", b+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	for _, l := range []net.Listener{la, lb} {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	h := n.Host("x")
	reach := func(addr string) bool {
		// bash's /dev/tcp: no extra tool needed inside the namespace.
		cmd := h.Command("timeout", "1", "bash", "-c", "exec 3<>/dev/tcp/"+strings.ReplaceAll(addr, ":", "/"))
		return cmd.Run() == nil
	}
	if !reach(la.Addr().String()) || !reach(lb.Addr().String()) {
		t.Fatal("host cannot reach the services before any cut")
	}
	h.Cut(a)
	if reach(la.Addr().String()) {
		t.Error("cut service still reachable")
	}
	if !reach(lb.Addr().String()) {
		t.Error("the other service became unreachable")
	}
	h.Heal(a)
	if !reach(la.Addr().String()) {
		t.Error("healed service unreachable")
	}
	if err := h.NetemAvailable(); err != nil {
		t.Logf("netem part skipped: %v", err)
		return
	}
	h.Netem("delay", "100ms")
	start := time.Now()
	if !reach(lb.Addr().String()) {
		t.Error("unreachable under delay")
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("connect took %s under 100 ms delay each way (want ≥ 200 ms)", d)
	}
	h.ClearNetem()
}

// TestCleanupRemoves: after a test using a host ends, its namespace and
// link are gone.
func TestCleanupRemoves(t *testing.T) {
	var name, link string
	t.Run("inner", func(t *testing.T) {
		n := New(t)
		n.ServiceIP()
		h := n.Host("y")
		name, link = h.Name, h.Link
	})
	if name == "" {
		t.Skip("inner test skipped")
	}
	out, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	if strings.Contains(string(out), name) {
		t.Errorf("namespace %s still exists after cleanup", name)
	}
	if exec.Command("ip", "link", "show", link).Run() == nil {
		t.Errorf("link %s still exists after cleanup", link)
	}
}
