// Package netns gives tests hosts of their own on one machine: each Host is
// a Linux network namespace joined to the root namespace by a veth pair, so
// that a process started in it (ip netns exec) reaches the test's services
// only over that link, and the link can be cut, cut toward one destination
// only, or slowed with tc netem. Services (etcd, the Kafka broker) listen on
// addresses of their own, added to the root namespace's loopback device, so
// that a host can lose one service and keep another.
//
// Everything lives in one private /24, 10.99.N.0/24 with N chosen at random
// among those no interface of the machine uses; names carry a random suffix,
// so parallel runs do not collide. All of it is removed by t.Cleanup, also
// when the test fails. Without root, or where `ip netns` fails, New skips the
// test and says why.
//
//	n := netns.New(t)
//	etcdIP := n.ServiceIP()            // listen here in the test process
//	h := n.Host("m1")
//	cmd := h.Command("keyshare", "member", "--etcd", "http://"+etcdIP+":2379", ...)
//	h.Cut(etcdIP)                      // member ↛ etcd; everything else still flows
//	h.Heal(etcdIP)
//	h.Netem("delay", "200ms", "loss", "5%")
//
// Addresses: .1–.9 services (on lo), .10–.129 the hosts' ends of their
// links, .130–.249 the root namespace's ends.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Net is one test's set of hosts and service addresses.
type Net struct {
	t      testing.TB
	suffix string // random, in every name
	subnet int    // N of 10.99.N.0/24

	mu       sync.Mutex
	services int
	hosts    map[string]*Host
}

// Host is a network namespace with one link (eth0 inside, Link outside) to
// the root namespace.
type Host struct {
	n    *Net
	Name string // namespace name, for ip netns exec
	Link string // root namespace's end of the veth pair
	IP   string // the host's address
	gw   string // root end's address, the host's next hop
	mu   sync.Mutex
	cut  map[string]bool
}

// New prepares a Net, or skips t when namespaces are not available.
func New(t testing.TB) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns: network namespaces need root (run as root, or these rows are skipped)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("netns: the ip command (iproute2) is not installed")
	}
	b := make([]byte, 3)
	rand.Read(b)
	n := &Net{t: t, suffix: hex.EncodeToString(b), hosts: map[string]*Host{}}
	// A /24 no interface uses yet.
	out, _ := exec.Command("ip", "-4", "-o", "addr").CombinedOutput()
	routes, _ := exec.Command("ip", "-4", "route", "show", "table", "all").CombinedOutput()
	for range 100 {
		c := 100 + mrand.IntN(150)
		p := fmt.Sprintf("10.99.%d.", c)
		if !strings.Contains(string(out), p) && !strings.Contains(string(routes), p) {
			n.subnet = c
			break
		}
	}
	if n.subnet == 0 {
		t.Skip("netns: no free 10.99.N.0/24 found")
	}
	// Probe: can this machine create a namespace at all?
	probe := "ks-" + n.suffix + "-probe"
	if out, err := exec.Command("ip", "netns", "add", probe).CombinedOutput(); err != nil {
		t.Skipf("netns: `ip netns add` failed (%v: %s); network partition rows need namespaces", err, strings.TrimSpace(string(out)))
	}
	exec.Command("ip", "netns", "del", probe).Run()
	return n
}

// ServiceIP adds a new address for a service to the root namespace's
// loopback device and returns it. A service listening there is reached by
// every host (and by the test itself).
func (n *Net) ServiceIP() string {
	n.t.Helper()
	n.mu.Lock()
	n.services++
	i := n.services
	n.mu.Unlock()
	if i > 9 {
		n.t.Fatal("netns: at most 9 service addresses")
	}
	ip := fmt.Sprintf("10.99.%d.%d", n.subnet, i)
	n.run("", "ip", "addr", "add", ip+"/32", "dev", "lo")
	n.t.Cleanup(func() { n.quiet("", "ip", "addr", "del", ip+"/32", "dev", "lo") })
	return ip
}

// Host returns the host called name, creating it on first use.
func (n *Net) Host(name string) *Host {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if h, ok := n.hosts[name]; ok {
		return h
	}
	i := len(n.hosts)
	if i >= 120 {
		n.t.Fatal("netns: at most 120 hosts")
	}
	h := &Host{n: n, Name: fmt.Sprintf("ks-%s-%s", n.suffix, name), Link: fmt.Sprintf("ks%s%d", n.suffix, i),
		IP: fmt.Sprintf("10.99.%d.%d", n.subnet, 10+i), gw: fmt.Sprintf("10.99.%d.%d", n.subnet, 130+i), cut: map[string]bool{}}
	n.run("", "ip", "netns", "add", h.Name)
	n.t.Cleanup(func() { n.quiet("", "ip", "netns", "del", h.Name) })
	n.run("", "ip", "link", "add", h.Link, "type", "veth", "peer", "name", "eth0", "netns", h.Name)
	// The kernel destroys a namespace (and the veth in it) asynchronously:
	// delete the pair first, so nothing outlives the test.
	n.t.Cleanup(func() { n.quiet("", "ip", "link", "del", h.Link) })
	n.run("", "ip", "addr", "add", h.gw+"/32", "dev", h.Link)
	n.run("", "ip", "link", "set", h.Link, "up")
	n.run("", "ip", "route", "add", h.IP+"/32", "dev", h.Link, "src", h.gw)
	n.run(h.Name, "ip", "link", "set", "lo", "up")
	n.run(h.Name, "ip", "addr", "add", h.IP+"/32", "dev", "eth0")
	n.run(h.Name, "ip", "link", "set", "eth0", "up")
	n.run(h.Name, "ip", "route", "add", h.gw+"/32", "dev", "eth0", "src", h.IP)
	// Only the test's /24 is routed: a host can reach nothing else.
	n.run(h.Name, "ip", "route", "add", fmt.Sprintf("10.99.%d.0/24", n.subnet), "via", h.gw, "dev", "eth0", "src", h.IP)
	n.hosts[name] = h
	return h
}

// Command returns a command that runs name args... on host h.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Cut drops every packet h sends to ip (a blackhole route in h's
// namespace): established connections hang as in a real partition, new
// ones time out. Traffic to other destinations still flows.
func (h *Host) Cut(ip string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cut[ip] {
		return
	}
	h.n.run(h.Name, "ip", "route", "add", "blackhole", ip+"/32")
	h.cut[ip] = true
}

// Heal undoes Cut(ip).
func (h *Host) Heal(ip string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.cut[ip] {
		return
	}
	h.n.run(h.Name, "ip", "route", "del", "blackhole", ip+"/32")
	delete(h.cut, ip)
}

// NetemAvailable reports whether the kernel has tc's netem qdisc (some
// kernels, e.g. minimal VM kernels, are built without sch_netem).
func (h *Host) NetemAvailable() error {
	if out, err := h.n.cmd(h.Name, "tc", "qdisc", "replace", "dev", "lo", "root", "netem", "delay", "1ms").CombinedOutput(); err != nil {
		return fmt.Errorf("netns: tc netem unavailable: %s", strings.TrimSpace(string(out)))
	}
	h.n.quiet(h.Name, "tc", "qdisc", "del", "dev", "lo", "root")
	return nil
}

// Netem applies tc netem with the given parameters (for example "delay",
// "200ms", "loss", "5%") to both directions of h's link.
func (h *Host) Netem(params ...string) {
	h.n.run(h.Name, "tc", append([]string{"qdisc", "replace", "dev", "eth0", "root", "netem"}, params...)...)
	h.n.run("", "tc", append([]string{"qdisc", "replace", "dev", h.Link, "root", "netem"}, params...)...)
}

// ClearNetem removes what Netem applied.
func (h *Host) ClearNetem() {
	h.n.quiet(h.Name, "tc", "qdisc", "del", "dev", "eth0", "root")
	h.n.quiet("", "tc", "qdisc", "del", "dev", h.Link, "root")
}

func (n *Net) cmd(ns, name string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command(name, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
}

func (n *Net) run(ns, name string, args ...string) {
	n.t.Helper()
	if out, err := n.cmd(ns, name, args...).CombinedOutput(); err != nil {
		n.t.Fatalf("netns: %s %s (namespace %q): %v: %s", name, strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
}

// quiet runs a cleanup step; failures are logged, not fatal.
func (n *Net) quiet(ns, name string, args ...string) {
	if out, err := n.cmd(ns, name, args...).CombinedOutput(); err != nil {
		n.t.Logf("netns cleanup: %s %s (namespace %q): %v: %s", name, strings.Join(args, " "), ns, err, strings.TrimSpace(string(out)))
	}
}
