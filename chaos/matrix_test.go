package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/testutil"
	"github.com/keyshare/keyshare/testutil/netns"
)

// row is one line of the fault matrix.
type row struct {
	name string
	// short rows also run in `make test`.
	short bool
	// graceful rows must not run any record twice.
	graceful bool
	// fault injects the row's faults while records flow.
	fault func(e *env, long bool, rng *rand.Rand)
	// extra checks after the run.
	check func(t *testing.T, e *env)
	// everyone: the fault hits every member at once (their sessions may
	// all be lost), so each may run its unflushed records again.
	everyone bool
	// brokers in the Kafka cluster (default 1).
	brokers int
	// kfakeOnly says why the row needs kfake (its faults are kfake's); it
	// is skipped on Apache Kafka.
	kfakeOnly string
	// apacheOnly says why the row needs Apache Kafka (its faults are a
	// real cluster's); it is skipped on kfake.
	apacheOnly string
	// etcdMembers in the etcd cluster (default 1).
	etcdMembers int
	// hosts: every member runs on a host of its own (a network
	// namespace, partition_test.go); slow: its links are slow and lossy.
	hosts, slow bool
	// moves: at least one range must have moved while its keys were
	// handled. (In every row the old and the new owner of a key must
	// never run it at once: overlap ≥ 0 on every moved range.)
	moves bool
	// memberArgs are flags every member of the row gets; hotShare is the
	// share of the produced records that has one key (0: none).
	memberArgs []string
	hotShare   float64
	// previous: the members start on the previous release's binary
	// (upgrade_test.go).
	previous bool
	// restore: etcd goes back to a backup (restore_test.go). The leader
	// then commits etcd's older records to Kafka again, as it repairs any
	// offset above etcd's record: those commit regressions are expected,
	// and the records handled since the backup may run again
	// (restoreBound).
	restore bool
	// handoffsOnly: every range that changes owner is handed over, none
	// fails over (an owner that cannot read what the others write shows
	// as failovers: its ranges are taken when its drain times out).
	handoffsOnly bool
	// eo: the members deliver to an endpoint applying each record through
	// pgsink, and the database is checked too (exactlyonce_test.go).
	eo eoMode
}

var rows = []row{
	{name: "1 baseline, no faults", short: true, graceful: true, fault: func(*env, bool, *rand.Rand) {}},
	{name: "2 rolling restart", short: true, graceful: true, fault: func(e *env, long bool, _ *rand.Rand) {
		for range rounds(long, 1, 3) {
			for _, id := range e.members() {
				e.stop(id, syscall.SIGTERM)
				e.startID(id)
				time.Sleep(500 * time.Millisecond)
			}
		}
	}},
	{name: "3 SIGKILL a random member", short: true, fault: func(e *env, long bool, rng *rand.Rand) {
		for range rounds(long, 1, 3) {
			ids := e.members()
			kill(e, ids[rng.IntN(len(ids))])
		}
	}},
	{name: "4 SIGKILL the leader", fault: func(e *env, long bool, _ *rand.Rand) {
		for range rounds(long, 1, 2) {
			kill(e, waitLeader(e))
		}
	}},
	{name: "5 zombie member (SIGSTOP 2.5×TTL)", short: true, fault: func(e *env, _ bool, _ *rand.Rand) {
		pause(e, nonLeader(e))
	}, check: checkZombie},
	{name: "6 zombie leader (SIGSTOP 2.5×TTL)", fault: func(e *env, _ bool, _ *rand.Rand) {
		pause(e, waitLeader(e))
	}, check: checkZombie},
	{name: "7 leader's lease revoked", fault: func(e *env, _ bool, _ *rand.Rand) {
		l := waitLeader(e)
		resp, err := e.cli.Get(e.t.Context(), "/keyshare/"+group+"/members/"+l)
		if err != nil || len(resp.Kvs) != 1 {
			e.t.Errorf("leader %s's registration: %v", l, err)
			return
		}
		if _, err := e.cli.Revoke(e.t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
			e.t.Error(err)
		}
		e.fault()
	}},
	{name: "8a etcd down 1 s (< TTL)", fault: func(e *env, _ bool, _ *rand.Rand) {
		e.restartEtcd(time.Second, false)
	}, everyone: true},
	{name: "8b etcd down 5 s (> TTL)", short: true, fault: func(e *env, _ bool, _ *rand.Rand) {
		e.restartEtcd(5*time.Second, false)
	}, everyone: true},
	{name: "8c etcd refusing writes, keeping leases (graceful stop), then down 5 s", fault: func(e *env, _ bool, _ *rand.Rand) {
		e.restartEtcd(5*time.Second, true)
	}, everyone: true},
	{name: "9a etcd leader stopped, restarted (3-member etcd)", etcdMembers: 3, fault: func(e *env, long bool, _ *rand.Rand) {
		for range rounds(long, 1, 3) {
			i := etcdLeader(e)
			if err := e.etcdCluster.Stop(i); err != nil {
				e.t.Fatal(err)
			}
			e.fault()
			time.Sleep(3 * time.Second)
			if err := e.etcdCluster.Restart(i); err != nil {
				e.t.Fatal(err)
			}
			time.Sleep(2 * time.Second)
		}
	}},
	{name: "9b etcd leader isolated 5 s (3-member etcd)", etcdMembers: 3, fault: func(e *env, long bool, _ *rand.Rand) {
		// Isolated longer than the session TTL: leases kept alive through
		// the isolated member expire on the majority side.
		for range rounds(long, 1, 2) {
			i := etcdLeader(e)
			e.etcdCluster.Isolate(i)
			e.fault()
			time.Sleep(5 * time.Second)
			e.etcdCluster.Heal(i)
			time.Sleep(2 * time.Second)
		}
		// Every member's session may live on the isolated etcd member.
	}, everyone: true},
	{name: "10 Kafka request faults", graceful: true, kfakeOnly: "kfake fault injection (kfake.Fault, ControlKey)", fault: func(e *env, _ bool, _ *rand.Rand) {
		e.mu.Lock()
		k := e.kafkaSrv
		e.mu.Unlock()
		e.fault()
		// A commit that applies but answers a timeout, commits refused by
		// a "moved" coordinator, fetches failing with a leadership error.
		h := k.Fault(
			kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.RequestTimedOut, Count: 5},
			kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Err: kerr.NotCoordinator, Count: 3},
			kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 10},
		)
		// Then connections dropped: the broker closes the connection
		// instead of answering the next fetches and commits.
		drops := map[kmsg.Key]*atomic.Int32{kmsg.Fetch: {}, kmsg.OffsetCommit: {}}
		for key, n := range map[kmsg.Key]int32{kmsg.Fetch: 6, kmsg.OffsetCommit: 3} {
			left := drops[key]
			left.Store(n)
			k.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
				// KeepControl is sticky in kfake: the last drop must
				// remove the control explicitly.
				if left.Add(-1) > 0 {
					k.KeepControl()
				} else {
					k.DropControl()
				}
				return nil, errors.New("chaos: connection dropped"), true
			})
		}
		time.Sleep(3 * time.Second)
		h.Remove()
		for key, left := range drops {
			if n := left.Load(); n > 0 {
				e.t.Errorf("%d planned connection drops on %s never happened", n, key.Name())
			}
		}
	}},
	{name: "11a partition leadership moves", graceful: true, brokers: 3, kfakeOnly: "kfake's MoveTopicPartition and RehashCoordinators", fault: func(e *env, long bool, _ *rand.Rand) {
		// Every second each partition's leader moves to the next broker
		// (its leader epoch grows, fetches at the old leader fail with
		// NOT_LEADER_OR_FOLLOWER), and the group coordinator moves too.
		e.mu.Lock()
		k, parts := e.kafkaSrv, e.parts
		e.mu.Unlock()
		// Count the fetches each broker serves, to show that the members
		// followed the leaders.
		var fetches []*kfake.FaultHandle
		for node := range int32(3) {
			fetches = append(fetches, k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Nodes: []int32{node}, Topic: topic, Count: -1, Observe: true}))
		}
		defer func() {
			served := 0
			var hits []int
			for _, f := range fetches {
				hits = append(hits, f.Hits())
				if f.Hits() > 0 {
					served++
				}
				f.Remove()
			}
			e.t.Logf("fetches served per broker while leadership moved: %v", hits)
			if served < 3 {
				e.t.Errorf("only %d of 3 brokers served fetches (%v): the members did not follow the moving leaders", served, hits)
			}
		}()
		for i := range rounds(long, 4, 10) {
			e.fault()
			for p := range parts {
				if err := k.MoveTopicPartition(topic, p, int32(i+int(p)+1)%3); err != nil {
					e.t.Fatalf("move partition %d: %v", p, err)
				}
			}
			k.RehashCoordinators()
			time.Sleep(time.Second)
		}
	}},
	{name: "11b broker restart from its data dir", graceful: true, fault: func(e *env, _ bool, _ *rand.Rand) {
		e.restartKafka(2 * time.Second)
	}},
	{name: "11c partition leadership moves (3 Apache brokers, none stopped)", short: true, graceful: true, brokers: 3, apacheOnly: "replicas reordered and a preferred leader elected by Kafka's Admin client", fault: func(e *env, long bool, _ *rand.Rand) {
		moveLeaders(e, rounds(long, 3, 8))
	}},
	{name: "11d broker SIGKILL + restart (3 Apache brokers)", graceful: true, brokers: 3, apacheOnly: "a killed broker of three, with replication factor 3", fault: func(e *env, long bool, _ *rand.Rand) {
		killBrokers(e, rounds(long, 1, 3))
	}},
	{name: "11e rolling broker restart (3 Apache brokers)", graceful: true, brokers: 3, apacheOnly: "each broker of three stopped and restarted in turn", fault: func(e *env, long bool, _ *rand.Rand) {
		rollBrokers(e, rounds(long, 1, 1))
	}},
	{name: "12 membership churn", graceful: true, fault: func(e *env, long bool, rng *rand.Rand) {
		// Toggle members m1..m5 every 0–500 ms (at least one stays).
		// An id is not started again until its previous process has
		// left (keyshare refuses a second live member with one id).
		deadline := time.Now().Add(time.Duration(rounds(long, 6, 30)) * time.Second)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			stopping = map[string]bool{}
			started  = map[string]time.Time{}
		)
		for time.Now().Before(deadline) {
			id := fmt.Sprintf("m%d", 1+rng.IntN(5))
			running := false
			for _, m := range e.members() {
				running = running || m == id
			}
			mu.Lock()
			// A process signalled before it installed its handler would
			// die without leaving: give each member a second first.
			busy := stopping[id] || time.Since(started[id]) < time.Second
			mu.Unlock()
			switch {
			case busy:
			case !running:
				e.startID(id)
				mu.Lock()
				started[id] = time.Now()
				mu.Unlock()
			case len(e.members()) > 1:
				mu.Lock()
				stopping[id] = true
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					e.stop(id, syscall.SIGTERM)
					mu.Lock()
					delete(stopping, id)
					mu.Unlock()
				}()
			}
			time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
		}
		wg.Wait()
	}},
	{name: "13 partitions added while running", graceful: true, fault: func(e *env, _ bool, _ *rand.Rand) {
		a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "log_level": 3})
		if err != nil {
			e.t.Fatal(err)
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := a.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: topic, IncreaseTo: 4}})
		if err != nil || res[0].Error.Code() != kafka.ErrNoError {
			e.t.Fatalf("create partitions: %v %v", err, res)
		}
		e.mu.Lock()
		e.parts = 4
		e.mu.Unlock()
		e.fault()
	}},
	{name: "14 garbage in etcd", fault: func(e *env, _ bool, _ *rand.Rand) {
		ctx := e.t.Context()
		root := "/keyshare/" + group + "/"
		resp, err := e.cli.Get(ctx, root+"ledger/", clientv3.WithPrefix(), clientv3.WithLimit(1))
		if err != nil || len(resp.Kvs) == 0 {
			e.t.Errorf("no ledger key to damage: %v", err)
			return
		}
		e.fault()
		_, _ = e.cli.Put(ctx, string(resp.Kvs[0].Key), `{"v":1,"segments":[{"lo":0,"hi":5,"next":-3}]}`)
		time.Sleep(time.Second)
		resp, _ = e.cli.Get(ctx, root+"ranges/", clientv3.WithPrefix(), clientv3.WithLimit(1))
		if len(resp.Kvs) > 0 {
			e.fault()
			_, _ = e.cli.Put(ctx, string(resp.Kvs[0].Key), "garbage")
		}
		_, _ = e.cli.Put(ctx, root+"members/not-a-member", "{}")
	}},
	{name: "15 records deleted before they were handled (retention)", short: true, fault: func(e *env, _ bool, _ *rand.Rand) {
		// Every member stops (SIGSTOP) so records pile up unhandled; the
		// log start of each partition moves to its end (DeleteRecords, as
		// retention would); then the stopped members are killed and new
		// ones start. They find the records gone: every one of them must
		// be reported lost, none silently skipped.
		ids := e.members()
		for _, id := range ids {
			e.signal(id, syscall.SIGSTOP)
		}
		e.fault()
		time.Sleep(1500 * time.Millisecond)
		e.deleteRecords()
		for _, id := range ids {
			e.stop(id, syscall.SIGKILL)
		}
		for range ids {
			e.start()
		}
	}, everyone: true, check: checkRetention},
}

// checkRetention: the row must have lost records to retention, and every
// report must name a log start that the deletion really reached.
func checkRetention(t *testing.T, e *env) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.losses) == 0 {
		t.Error("no loss report: the row deleted no unhandled record, it tests nothing")
	}
	for _, l := range e.losses {
		if l.LogStart > e.deleted[l.Partition] {
			t.Errorf("report %+v names log start %d, but partition %d was deleted up to %d only", l, l.LogStart, l.Partition, e.deleted[l.Partition])
		}
	}
}

// kill SIGKILLs member id, then starts a replacement.
func kill(e *env, id string) {
	e.stop(id, syscall.SIGKILL)
	e.fault()
	time.Sleep(time.Second)
	e.start()
	time.Sleep(time.Second)
}

// pause makes member id a zombie: stopped for 2.5 × its TTL (its lease
// expires and its ranges move), then continued.
func pause(e *env, id string) {
	e.signal(id, syscall.SIGSTOP)
	e.fault()
	time.Sleep(ttl * 5 / 2)
	e.signal(id, syscall.SIGCONT)
	zombies.Store(e, id)
}

func rounds(long bool, short, full int) int {
	if long {
		return full
	}
	return short
}

// zombies remembers which member each zombie row paused.
var zombies sync.Map

func waitLeader(e *env) string {
	for range 100 {
		if l := e.leader(); l != "" {
			return l
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatal("no leader")
	return ""
}

// etcdLeader is the index of the etcd cluster's raft leader.
func etcdLeader(e *env) int {
	i, err := e.etcdCluster.Leader()
	if err != nil {
		e.t.Fatal(err)
	}
	return i
}

func nonLeader(e *env) string {
	l := waitLeader(e)
	for _, id := range e.members() {
		if id != l {
			return id
		}
	}
	e.t.Fatal("no member but the leader")
	return ""
}

// checkZombie: the paused member must have found its session gone when it
// woke up, and stopped its work (it rejoins with a new session).
func checkZombie(t *testing.T, e *env) {
	z, ok := zombies.Load(e)
	if !ok {
		t.Fatal("no zombie recorded")
	}
	log := e.memberLog(z.(string))
	if !strings.Contains(log, "session lost") {
		t.Errorf("zombie %s never noticed its session was gone; its log:\n%s", z, log)
	}
}

// TestFaultMatrix runs each row: three members, a producer, faults, then a
// history check. KEYSHARE_CHAOS=long runs every row longer and writes
// docs/reliability.md.
func TestFaultMatrix(t *testing.T) {
	long := os.Getenv("KEYSHARE_CHAOS") == "long"
	var results []result
	for _, r := range rows {
		if !long && !r.short {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			res := runRow(t, r, long)
			t.Log(res)
			results = append(results, res)
		})
	}
	// The report needs every row of this backend (a -run filter selects
	// fewer).
	want := 0
	for _, r := range rows {
		if r.runsOn(testutil.KafkaBackend()) {
			want++
		}
	}
	if long && len(results) == want && testutil.KafkaBackend() == testutil.BackendKfake {
		writeReport(t, results)
	}
}

// runsOn says whether the row runs on Kafka backend b.
func (r row) runsOn(b string) bool {
	switch {
	case r.kfakeOnly != "":
		return b == testutil.BackendKfake
	case r.apacheOnly != "":
		return b == testutil.BackendApache
	}
	return true
}

func runRow(t *testing.T, r row, long bool) result {
	if !r.runsOn(testutil.KafkaBackend()) {
		if r.kfakeOnly != "" {
			t.Skipf("kfake only: %s", r.kfakeOnly)
		}
		t.Skipf("Apache Kafka only (KEYSHARE_KAFKA=apache): %s", r.apacheOnly)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	var n *netns.Net
	if r.hosts {
		n = netns.New(t) // skips where namespaces are not available
	}
	e := newEnvOn(t, 2, max(1, r.brokers), max(1, r.etcdMembers), n, r.slow)
	e.memberArgs, e.hotShare = r.memberArgs, r.hotShare
	if r.eo != eoOff {
		addr := "127.0.0.1:0"
		if n != nil {
			addr = n.ServiceIP() + ":0" // the members reach it from their hosts
		}
		e.eo = startEO(t, e.dir, addr, r.eo)
	}
	if r.previous {
		usePrevious(t, e)
	}
	for range 3 {
		e.start()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obsDone := make(chan struct{})
	go func() { defer close(obsDone); e.observeCommits(ctx) }()

	rate, secs := 400.0, 8
	if long {
		rate, secs = 1000.0, 25
	}
	prodErr := make(chan error, 1)
	go func() { prodErr <- e.produce(ctx, int(rate)*secs, 300, rate) }()
	time.Sleep(time.Duration(secs) * time.Second / 4)
	r.fault(e, long, rng)
	if err := <-prodErr; err != nil {
		t.Fatalf("producer: %v", err)
	}
	deadline := time.Now().Add(120 * time.Second)
	for !e.committedAtEnd() {
		if time.Now().After(deadline) {
			t.Error("the committed offsets did not reach the end within 120 s")
			e.dumpMetrics()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range e.members() {
		e.stop(id, syscall.SIGTERM)
	}
	cancel()
	<-obsDone

	bound := 0
	switch {
	case r.restore:
		bound = restoreBound(rate)
	case r.everyone:
		// Every member may lose its session: each re-runs at most its
		// unflushed completions (capped at MaxUnflushed, however long
		// etcd is away) plus its records in flight.
		bound = 3 * (maxUnflushed + maxInFlight)
	case !r.graceful:
		bound = crashBound(rate)
	}
	res := e.check(r.name, bound)
	if res.Lost > 0 || res.OrderViolations > 0 || (res.CommitRegression > 0 && !r.restore) || res.CommitPastUndone > 0 {
		t.Errorf("guarantee broken: %s", res)
		e.dumpLogs()
	}
	// The previous release may run records twice (its fenced release
	// drops a range's unflushed completions; its leave can release older
	// state): each of its processes at most what a crash would
	// (docs/upgrades.md).
	if res.WorstPerFault > bound || (r.graceful && res.Duplicates > res.DupsByPrevious) || res.DupsByPrevious > res.PreviousRuns*crashBound(rate) {
		t.Errorf("duplicates over the bound: %s\n%s", res, strings.Join(res.DupSamples, "\n"))
		e.dumpLogs()
	}
	// Per-key order holds across graceful handoffs and, given lease
	// expiry, across failovers: no row may see two members run a key at
	// once, whatever the fault.
	if res.Overlap.Overlaps > 0 {
		t.Errorf("old and new owner ran a key at once: %s", res.Overlap)
	}
	// The previous release lets a range fail over when its release is
	// fenced and its drain budget runs out (docs/upgrades.md).
	if r.handoffsOnly && res.Overlap.Failovers > res.Overlap.FailoversByPrevious {
		t.Errorf("ranges failed over where every owner should hand over: %s", res.Overlap)
		e.dumpLogs()
	}
	if r.moves && res.Overlap.Moves == 0 {
		t.Errorf("no range changed owner while its keys were handled: the row tested no handover")
	}
	if e.eo != nil {
		c := e.checkEO()
		t.Log(c)
		eoChecks.Store(e, c)
		if r.eo == eoFenced && c.broken() {
			t.Errorf("exactly-once broken: %s", c)
		}
	}
	if r.check != nil {
		r.check(t, e)
	}
	if os.Getenv("KEYSHARE_CHAOS_LOGS") != "" {
		e.dumpLogs() // the members' logs of a passing row, for a closer look
	}
	return res
}

// crashBound is the duplicates a member's crash may cause at rate records
// a second: its completions not yet flushed and its records in flight.
func crashBound(rate float64) int {
	return min(int(flushInterval.Seconds()*rate), maxUnflushed) + maxInFlight
}

// writeReport puts the matrix's table, one line per row in results, in
// place of the table in docs/reliability.md. The prose around it is
// written there by hand: only the figures are generated.
func writeReport(t *testing.T, results []result) {
	var b strings.Builder
	b.WriteString(reportTableHead)
	for _, r := range results {
		gap, fgap := "–", "–"
		if r.Overlap.Moves > 0 {
			gap = fmt.Sprintf("%s (%d, %d)", r.Overlap.Min.Round(time.Millisecond), r.Overlap.Moves, r.Overlap.Overlaps)
		}
		if r.Overlap.Failovers > 0 {
			fgap = fmt.Sprintf("%s (%d)", r.Overlap.FailoverMin.Round(time.Millisecond), r.Overlap.Failovers)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d (%d / %d) | %d | %d | %d | %d | %s | %s | %s |\n",
			r.Row, r.Faults, r.Acked, r.Lost, r.LostToRetention, r.Duplicates, r.WorstPerFault, r.Bound, r.OrderViolations, r.CommitRegression, r.CommitPastUndone, r.StaleWrites, r.Recovery.Round(10*time.Millisecond), gap, fgap)
	}
	const path = "../docs/reliability.md"
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := replaceTable(string(doc), reportTableHead, b.String())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// reportTableHead is the head of the matrix's table in docs/reliability.md.
const reportTableHead = "| row | faults | acked | lost | lost to retention, reported | duplicates (worst fault / bound) | order violations | commit regressions | commits past unhandled | stale writes accepted | recovery | old→new owner gap, min (changes, negative) | same, at failovers (changes) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"

// replaceTable returns doc with the Markdown table that starts with head
// (its lines up to the first that is not a table line) replaced by table.
func replaceTable(doc, head, table string) (string, error) {
	start := strings.Index(doc, head)
	if start < 0 {
		first, _, _ := strings.Cut(head, "\n")
		return "", fmt.Errorf("no table to replace: put the line %q back where the matrix's figures go", first)
	}
	end := start
	for end < len(doc) && doc[end] == '|' {
		nl := strings.IndexByte(doc[end:], '\n')
		if nl < 0 {
			end = len(doc)
			break
		}
		end += nl + 1
	}
	return doc[:start] + table + doc[end:], nil
}
