package chaos

import (
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/keyshare/keyshare/internal/netns"
)

// Network partitions (issue 20). Each member runs on a host of its own: a
// network namespace with one veth link to the test's namespace, where etcd
// and the broker listen on two different addresses. A blackhole route in
// the member's namespace cuts it from one of them and not the other: the
// classic zombie is a member cut from etcd that still reaches Kafka.
//
// Where the kernel has no netem (this project's VMs do not), the slow row
// relays every member connection through netns.SlowLink: 200 ms each way,
// 5% of chunks stalled as TCP loss recovery would stall them.
var partitionRows = []row{
	{name: "16a member cut from etcd 3×TTL, reaching Kafka", short: true, hosts: true, noOverlap: true, moves: true,
		fault: func(e *env, _ bool, _ *rand.Rand) { cutEtcd(e, nonLeader(e)) }, check: checkLostSession},
	{name: "16b leader cut from etcd 3×TTL, reaching Kafka", hosts: true, noOverlap: true, moves: true,
		fault: func(e *env, _ bool, _ *rand.Rand) { cutEtcd(e, waitLeader(e)) }, check: checkLostSession},
	{name: "16c member cut from Kafka 3×TTL, reaching etcd", hosts: true, noOverlap: true,
		fault: func(e *env, _ bool, _ *rand.Rand) {
			id := nonLeader(e)
			h := e.net.Host(id)
			h.Cut(e.kafkaIP)
			e.fault()
			time.Sleep(3 * ttl)
			h.Heal(e.kafkaIP)
		}},
	{name: "16d etcd member isolated 3×TTL (3-member etcd)", etcdMembers: 3, noOverlap: true, everyone: true,
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
	{name: "16e 200 ms delay, 5% loss on every member's links", hosts: true, slow: true, noOverlap: true, everyone: true,
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
