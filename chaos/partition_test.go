package chaos

import (
	"encoding/json"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/keyshare/keyshare/testutil/netns"
)

// Network partitions. Each member runs on a host of its own: a
// network namespace with one veth link to the test's namespace, where etcd
// and the broker listen on two different addresses. A blackhole route in
// the member's namespace cuts it from one of them and not the other: the
// classic zombie is a member cut from etcd that still reaches Kafka.
//
// Where the kernel has no netem (this project's VMs do not), the slow row
// relays every member connection through netns.SlowLink: 200 ms each way,
// 5% of chunks stalled as TCP loss recovery would stall them.
var partitionRows = []row{
	{name: "16a member cut from etcd 3×TTL, reaching Kafka", short: true, hosts: true, moves: true,
		fault: func(e *env, _ bool, _ *rand.Rand) { cutEtcd(e, nonLeader(e)) }, check: checkLostSession},
	{name: "16b leader cut from etcd 3×TTL, reaching Kafka", hosts: true, moves: true,
		fault: func(e *env, _ bool, _ *rand.Rand) { cutEtcd(e, waitLeader(e)) }, check: checkLostSession},
	{name: "16c member cut from Kafka 3×TTL, reaching etcd", hosts: true,
		fault: func(e *env, _ bool, _ *rand.Rand) {
			id := nonLeader(e)
			h := e.net.Host(id)
			h.Cut(e.kafkaIP)
			from := time.Now()
			e.fault()
			time.Sleep(3 * ttl)
			h.Heal(e.kafkaIP)
			cuts.Store(e, cut{id, from, time.Now()})
		}, check: checkKafkaCut},
	{name: "16d etcd member isolated 3×TTL (3-member etcd)", etcdMembers: 3, everyone: true,
		fault: func(e *env, long bool, rng *rand.Rand) {
			// Any member, leader or follower: a client on the isolated
			// member must fail over to the majority.
			for range rounds(long, 1, 2) {
				i := rng.IntN(3)
				e.t.Logf("isolating etcd member %d (leader %d)", i, etcdLeader(e))
				e.etcdCluster.Isolate(i)
				e.fault()
				time.Sleep(3 * ttl)
				e.etcdCluster.Heal(i)
				time.Sleep(2 * time.Second)
			}
		}},
	{name: "16e 200 ms delay, 5% loss on every member's links", hosts: true, slow: true, everyone: true,
		fault: func(*env, bool, *rand.Rand) {}},
}

func init() { rows = append(rows, partitionRows...) }

// cutEtcd cuts member id from etcd (not from Kafka) for 3 × TTL, then heals.
func cutEtcd(e *env, id string) {
	h := e.net.Host(id)
	h.Cut(e.etcdIP)
	e.fault()
	zombies.Store(e, id)
	time.Sleep(3 * ttl)
	h.Heal(e.etcdIP)
}

// checkLostSession: the cut member must have ended its session itself.
func checkLostSession(t *testing.T, e *env) {
	z, ok := zombies.Load(e)
	if !ok {
		t.Fatal("no cut member recorded")
	}
	if log := e.memberLog(z.(string)); !strings.Contains(log, "session lost") && !strings.Contains(log, "lease deadline") {
		t.Errorf("member %s, cut from etcd for 3×TTL, never ended its session; its log:\n%s", z, log)
	}
}

// cut is who was cut from Kafka, and when.
type cut struct {
	id       string
	from, to time.Time
}

var cuts sync.Map // *env → cut

// checkKafkaCut: the cut must have stopped the member (else the row tests
// nothing): once what it had fetched is done (2 s), it starts no record
// until the link is healed, and it starts records again after.
func checkKafkaCut(t *testing.T, e *env) {
	v, ok := cuts.Load(e)
	if !ok {
		t.Fatal("no cut recorded")
	}
	c := v.(cut)
	during, after := 0, 0
	e.mu.Lock()
	dir := e.dir
	e.mu.Unlock()
	for _, l := range readLines(t, filepath.Join(dir, c.id+".jsonl")) {
		switch {
		case l.Start.After(c.from.Add(2*time.Second)) && l.Start.Before(c.to):
			during++
		case l.Start.After(c.to):
			after++
		}
	}
	t.Logf("member %s cut from Kafka: %d records started in the cut (after 2 s), %d after it", c.id, during, after)
	if during > 0 || after == 0 {
		t.Errorf("the cut from Kafka did not hold member %s (%d starts during, %d after)", c.id, during, after)
	}
}

// readLines reads one member's record log.
func readLines(t *testing.T, path string) []handledLine {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []handledLine
	for _, l := range strings.Split(string(b), "\n") {
		var h handledLine
		if json.Unmarshal([]byte(l), &h) == nil {
			out = append(out, h)
		}
	}
	return out
}

// advertised is a listener that tells kfake another address to advertise.
type advertised struct {
	net.Listener
	addr net.Addr
}

func (a advertised) Addr() net.Addr { return a.addr }

// listenOn makes kfake listen on ip (kfake itself listens on 127.0.0.1);
// with slow, it advertises a slow link to it instead, so that every client
// connection to the broker passes through the link.
func listenOn(t *testing.T, n *netns.Net, ip string, slow bool) kfake.Opt {
	return kfake.ListenFn(func(network, address string) (net.Listener, error) {
		_, port, _ := net.SplitHostPort(address)
		ln, err := net.Listen(network, net.JoinHostPort(ip, port))
		if err != nil || !slow {
			return ln, err
		}
		l := slowLink(t, n, ln.Addr().String())
		a, _ := net.ResolveTCPAddr("tcp", l.Addr())
		return advertised{Listener: ln, addr: a}, nil
	})
}

// slowLink relays a new service address of n to upstream, 200 ms each way
// with 5% loss.
func slowLink(t *testing.T, n *netns.Net, upstream string) *netns.SlowLink {
	return netns.NewSlowLink(t, n.ServiceIP()+":0", upstream, 200*time.Millisecond, 0.05)
}
