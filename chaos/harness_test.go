package chaos

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
	"github.com/keyshare/keyshare/testutil/netns"
)

const (
	topic = "chaos"
	group = "chaos"
	ttl   = 2 * time.Second
	// flushInterval and maxInFlight are the members' defaults; they bound
	// the duplicates a crash may cause (design: flush interval × rate +
	// in-flight bound).
	flushInterval = 500 * time.Millisecond
	maxInFlight   = 1000
	maxUnflushed  = 10000
	// maxDupSamples duplicates are described in a row's failure.
	maxDupSamples = 10
	stamp         = "15:04:05.000"
)

// bin is the binary the members run, built once: keyshare-bench, whose
// member command is keyshare member's with the simulated work, record log
// and audit log the checks read. (The previous release's members run its
// own keyshare member, which still had them: upgrade_test.go.)
var bin string

func TestMain(m *testing.M) {
	var cleanup func()
	var err error
	bin, cleanup, err = testutil.BuildCommand("../cmd/keyshare-bench", "keyshare-bench", false)
	if err != nil {
		panic(err)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// env is one row's world: etcd, a broker, member processes, a producer and a
// commit observer.
type env struct {
	t           *testing.T
	dir         string
	etcdURL     string
	etcdPeer    string
	brokers     string
	cli         *clientv3.Client
	etcdSrv     *devcluster.Etcd        // one etcd server, or
	etcdCluster *devcluster.EtcdCluster // several
	kafkaSrv    *kfake.Cluster          // the kfake cluster, or
	apache      *devcluster.ApacheKafka // Apache Kafka (KEYSHARE_KAFKA=apache)
	parts       int32                   // guarded by mu

	mu      sync.Mutex
	procs   map[string]*exec.Cmd
	runs    []memberRun       // every member process started, in order
	metrics map[string]string // member id → metrics address
	next    int
	acked   []ack
	commits []commitObs
	faults  []time.Time
	deleted map[int32]int64     // partition → log start after DeleteRecords
	losses  []schema.LossRecord // loss reports found in etcd by check
	grants  []grant             // range records seen in etcd (overlap_test.go)
	plans   []planSeen          // handoff plans seen in etcd

	// Hosts of their own (partition_test.go); nil: members run on this host.
	net             *netns.Net
	etcdIP, kafkaIP string // service addresses on n
	memberEtcd      string // etcd endpoints the members use (default etcdURL)

	// The row's workload (row.memberArgs, row.hotShare), set before the
	// first member starts.
	memberArgs []string
	hotShare   float64
	// bin is the binary whose member command members start from
	// (setBinary); the tree's keyshare-bench unless a row changes it.
	bin string
	// restored: etcd was restored from a backup (restore_test.go).
	restored bool
	// noStarts are spans in which no member may start a record
	// (quorum_test.go).
	noStarts []window
	// eo: the members deliver to this endpoint, which applies each record
	// through pgsink (exactlyonce_test.go); nil: simulated work.
	eo *eoEndpoint
}

// binary is the binary whose member command the next member runs.
func (e *env) binary() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.bin == "" {
		return bin
	}
	return e.bin
}

// setBinary makes the members started from now on run b.
func (e *env) setBinary(b string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bin = b
}

type ack struct {
	partition int32
	offset    int64
	key       string
	seq       int
	at        time.Time // when the producer got the acknowledgement
}

type commitObs struct {
	// The commit was in Kafka at some moment between sent and at: the
	// broker reads it when the request reaches the group coordinator,
	// which while a broker restarts is up to the observer's 2 s timeout
	// after sent. A record handled after at was provably unhandled while
	// the commit was in Kafka; one handled between sent and at may have
	// been handled before the commit was made (see check).
	at        time.Time // when the observer had the answer
	sent      time.Time // when it asked
	partition int32
	offset    int64
}

// newEnv starts etcd (etcdMembers members) and a Kafka cluster of brokers
// brokers with a topic of parts partitions: kfake, or with
// KEYSHARE_KAFKA=apache an Apache Kafka cluster of the row's own (its
// brokers are killed and restarted, and its topic and group names are the
// same in every row).
func newEnv(t *testing.T, parts int32, brokers, etcdMembers int) *env {
	return newEnvOn(t, parts, brokers, etcdMembers, nil, false)
}

// newEnvOn is newEnv with members on hosts of their own (n not nil): etcd
// and the broker then listen on service addresses of n; with slow, every
// member's connections to them pass through slow links (partition_test.go).
func newEnvOn(t *testing.T, parts int32, brokers, etcdMembers int, n *netns.Net, slow bool) *env {
	dir := t.TempDir()
	en := &env{t: t, dir: dir, parts: parts, procs: map[string]*exec.Cmd{}, net: n}
	etcdAddr, kafkaOpts := "", []kfake.Opt(nil)
	if n != nil {
		en.etcdIP, en.kafkaIP = n.ServiceIP(), n.ServiceIP()
		etcdAddr = en.etcdIP + ":0"
		kafkaOpts = append(kafkaOpts, listenOn(t, n, en.kafkaIP, slow))
	}
	var endpoints []string
	if etcdMembers > 1 {
		c, err := devcluster.StartEtcdCluster(devcluster.EtcdClusterOptions{Dir: filepath.Join(dir, "etcd"), Size: etcdMembers})
		if err != nil {
			t.Fatal(err)
		}
		en.etcdCluster, endpoints = c, c.Endpoints()
	} else {
		e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: filepath.Join(dir, "etcd"), ClientAddr: etcdAddr})
		if err != nil {
			t.Fatal(err)
		}
		en.etcdSrv, endpoints = e, []string{e.ClientURL()}
		en.etcdPeer = e.Peers[0].Addr().String()
	}
	var brokerAddrs []string
	if testutil.KafkaBackend() == testutil.BackendApache {
		// Its cleanup (registered first, so run last) kills it and keeps
		// the broker logs if the row failed.
		opts := devcluster.ApacheKafkaOptions{Nodes: brokers, Topics: map[string]int32{topic: parts}}
		if n != nil {
			if slow {
				t.Skip("slow links relay kfake's listener only; Apache Kafka advertises its own address")
			}
			opts.Addr = en.kafkaIP + ":0" // members reach it on their hosts
		}
		en.apache = testutil.StartApacheKafka(t, opts)
		brokerAddrs = en.apache.ListenAddrs()
	} else {
		k, err := devcluster.StartKafka(devcluster.KafkaOptions{DataDir: filepath.Join(dir, "kafka"), Topics: map[string]int32{topic: parts}, Brokers: brokers, Extra: kafkaOpts})
		if err != nil {
			t.Fatal(err)
		}
		en.kafkaSrv, brokerAddrs = k, k.ListenAddrs()
	}
	en.etcdURL, en.brokers = strings.Join(endpoints, ","), strings.Join(brokerAddrs, ",")
	t.Cleanup(func() {
		en.mu.Lock()
		defer en.mu.Unlock()
		if en.kafkaSrv != nil {
			en.kafkaSrv.Close()
		}
		if en.etcdCluster != nil {
			en.etcdCluster.Close()
		} else {
			en.etcdSrv.Close()
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	en.cli = cli
	en.memberEtcd = en.etcdURL
	if slow {
		en.memberEtcd = "http://" + slowLink(t, n, strings.TrimPrefix(en.etcdURL, "http://")).Addr()
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan struct{})
	go func() { defer close(wdone); en.watchRanges(wctx) }()
	t.Cleanup(func() { wcancel(); <-wdone })
	t.Cleanup(en.killAll)
	return en
}

// restartEtcd stops the etcd server as a crash would, waits down, then
// starts it again on the same addresses and data. With graceful, it stops
// the server with embed's Close instead, which for up to 7 s keeps serving
// the streams already open (lease keepalives) while refusing new requests:
// sessions stay alive while no write lands.
func (e *env) restartEtcd(down time.Duration, graceful bool) {
	e.mu.Lock()
	srv := e.etcdSrv // only this goroutine replaces it
	e.mu.Unlock()
	if graceful {
		srv.Close() // up to 7 s: not under e.mu, which the producer needs
	} else {
		srv.Kill()
	}
	e.fault()
	time.Sleep(down)
	srv, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: filepath.Join(e.dir, "etcd"),
		ClientAddr: strings.TrimPrefix(e.etcdURL, "http://"), PeerAddr: e.etcdPeer})
	if err != nil {
		e.t.Fatalf("restart etcd: %v", err)
	}
	e.mu.Lock()
	e.etcdSrv = srv
	e.mu.Unlock()
}

// restartKafka stops the broker for down, then starts it again on the same
// port from its data directory. kfake is closed; Apache Kafka is killed
// (SIGKILL), as a crash would.
func (e *env) restartKafka(down time.Duration) {
	if e.apache != nil {
		if err := e.apache.Kill(0); err != nil {
			e.t.Fatalf("kill kafka: %v", err)
		}
		e.fault()
		time.Sleep(down)
		if err := e.apache.Restart(0); err != nil {
			e.t.Fatalf("restart kafka: %v", err)
		}
		return
	}
	e.mu.Lock()
	e.kafkaSrv.Close()
	e.mu.Unlock()
	e.fault()
	time.Sleep(down)
	k, err := devcluster.StartKafka(devcluster.KafkaOptions{Addr: e.brokers, DataDir: filepath.Join(e.dir, "kafka")})
	if err != nil {
		e.t.Fatalf("restart kafka: %v", err)
	}
	e.mu.Lock()
	e.kafkaSrv = k
	e.mu.Unlock()
}

// deleteRecords moves the log start of every partition to its end, as
// retention would, through the Kafka admin API.
func (e *env) deleteRecords() {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "log_level": 3})
	if err != nil {
		e.t.Fatal(err)
	}
	defer a.Close()
	e.mu.Lock()
	parts := e.parts
	e.mu.Unlock()
	t := topic
	var tps []kafka.TopicPartition
	for p := range parts {
		tps = append(tps, kafka.TopicPartition{Topic: &t, Partition: p, Offset: kafka.OffsetEnd})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.DeleteRecords(ctx, tps)
	if err != nil {
		e.t.Fatalf("delete records: %v", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.deleted = map[int32]int64{}
	for _, r := range res.DeleteRecordsResults {
		if r.TopicPartition.Error != nil || r.DeletedRecords == nil {
			e.t.Fatalf("delete records of partition %d: %v", r.TopicPartition.Partition, r.TopicPartition.Error)
		}
		e.deleted[r.TopicPartition.Partition] = int64(r.DeletedRecords.LowWatermark)
	}
	e.t.Logf("log starts moved to %v", e.deleted)
}

// readLosses reads the loss reports the members wrote to etcd.
func (e *env) readLosses() []schema.LossRecord {
	s := schema.Group{Prefix: "/keyshare", Name: group}.Keys()
	resp, err := e.cli.Get(e.t.Context(), s.Lost(), clientv3.WithPrefix())
	if err != nil {
		e.t.Fatalf("read loss reports: %v", err)
	}
	var out []schema.LossRecord
	for _, kv := range resp.Kvs {
		l, err := schema.DecodeLoss(schema.Group{Name: group}, string(kv.Key), kv.Value)
		if err != nil {
			e.t.Errorf("loss report: %v", err)
			continue
		}
		out = append(out, l)
	}
	return out
}

// start launches a new member process and returns its id.
func (e *env) start() string {
	e.mu.Lock()
	e.next++
	id := fmt.Sprintf("m%d", e.next)
	e.mu.Unlock()
	e.startID(id)
	return id
}

func (e *env) startID(id string) {
	// The member does simulated work and writes its record log, or
	// delivers to the row's endpoint, which writes the log for it
	// (exactlyonce_test.go).
	work := []string{"--work", "uniform:0-1ms", "--record", filepath.Join(e.dir, id+".jsonl")}
	if e.eo != nil {
		work = []string{"--deliver", e.eo.url}
	}
	args := []string{"member", "--brokers", e.brokers, "--etcd", e.memberEtcd, "--group", group, "--topic", topic, "--id", id}
	args = append(args, work...)
	args = append(args, "--audit", filepath.Join(e.dir, id+".audit"),
		"--ttl", ttl.String(), "--drain-timeout", "10s", "--log-level", "info", "--metrics-addr", e.newMetricsAddr(id))
	args = append(args, e.memberArgs...)
	// KEYSHARE_CHAOS_MEMBER_ARGS adds member flags (later ones win), e.g.
	// "--batch-size 50 --work call:1ms+0.02ms" runs the matrix on batches.
	extra := strings.Fields(os.Getenv("KEYSHARE_CHAOS_MEMBER_ARGS"))
	if e.eo != nil {
		extra = withoutSimulatedWork(extra)
	}
	args = append(args, extra...)
	b := e.binary()
	cmd := exec.Command(b, args...)
	if e.net != nil {
		cmd = e.net.Host(id).Command(b, args...) // ip netns exec execs the member: the pid is the member's
	}
	logf, err := os.OpenFile(filepath.Join(e.dir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	run := memberRun{id: id, from: time.Now(), previous: b != bin}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.procs[id] = cmd
	e.runs = append(e.runs, run)
	e.mu.Unlock()
}

// memberRun is one member process: its id, when it was started, and
// whether it ran the previous release (upgrade_test.go).
type memberRun struct {
	id       string
	from     time.Time
	previous bool
}

// onPrevious reports whether member id was running the previous release at
// at: the process of that id started last before at was (e.mu held). An id
// runs one process at a time (stop waits for the exit), so that process is
// the one that logged at.
func (e *env) onPrevious(id string, at time.Time) bool {
	for i := len(e.runs) - 1; i >= 0; i-- {
		if r := e.runs[i]; r.id == id && !r.from.After(at) {
			return r.previous
		}
	}
	return false
}

// withoutSimulatedWork drops the flags of the simulated handler, which
// the member refuses beside --deliver, and their values.
func withoutSimulatedWork(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		name, _, inline := strings.Cut(args[i], "=")
		switch strings.TrimLeft(name, "-") {
		case "work", "record", "fail-rate", "stall":
			if !inline {
				i++ // its value
			}
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// members lists the running member ids.
func (e *env) members() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id := range e.procs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// stop sends sig to member id; SIGTERM waits for a graceful exit.
func (e *env) stop(id string, sig syscall.Signal) {
	e.mu.Lock()
	cmd := e.procs[id]
	delete(e.procs, id)
	e.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if sig == syscall.SIGTERM && err != nil {
			e.t.Errorf("member %s did not exit cleanly on SIGTERM: %v\n%s", id, err, e.memberLog(id))
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		e.t.Errorf("member %s did not exit within 60s of %v", id, sig)
	}
}

// signal sends sig without waiting (SIGSTOP, SIGCONT).
func (e *env) signal(id string, sig syscall.Signal) {
	e.mu.Lock()
	cmd := e.procs[id]
	e.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

func (e *env) killAll() {
	for _, id := range e.members() {
		e.signal(id, syscall.SIGCONT)
		e.stop(id, syscall.SIGKILL)
	}
}

// newMetricsAddr picks member id's metrics address for a process about to
// start: a port free now. Each start picks afresh: a port kept from an
// earlier process of the id may have been taken since (a broker
// connection's ephemeral port, say), and the member would then fail to
// bind it.
func (e *env) newMetricsAddr(id string) string {
	addr := testutil.FreeAddr(e.t)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.metrics == nil {
		e.metrics = map[string]string{}
	}
	e.metrics[id] = addr
	return e.metrics[id]
}

// metricsAddr is the metrics address of member id's latest process.
func (e *env) metricsAddr(id string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.metrics[id]
}

// dumpMetrics logs the state gauges of every running member and the group's
// ranges and ledger in etcd.
func (e *env) dumpMetrics() {
	if resp, err := e.cli.Get(e.t.Context(), "/keyshare/"+group+"/", clientv3.WithPrefix()); err == nil {
		var b strings.Builder
		for _, kv := range resp.Kvs {
			if k := string(kv.Key); strings.Contains(k, "/ranges/") || strings.Contains(k, "/ledger/") || strings.Contains(k, "/commits/") {
				fmt.Fprintf(&b, "%s %s\n", k, kv.Value)
			}
		}
		e.t.Logf("etcd state:\n%s", b.String())
	}
	for _, id := range e.members() {
		resp, err := http.Get("http://" + e.metricsAddr(id) + "/metrics")
		if err != nil {
			e.t.Logf("%s metrics: %v", id, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "keyshare_") && !strings.Contains(l, "_bucket") {
				keep = append(keep, l)
			}
		}
		e.t.Logf("%s metrics:\n%s", id, strings.Join(keep, "\n"))
	}
}

// logTail is how many lines of each member's log dumpLogs shows.
const logTail = 200

// dumpLogs passes the tail of every member's log to t.Log.
func (e *env) dumpLogs() {
	files, _ := filepath.Glob(filepath.Join(e.dir, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		e.t.Logf("--- %s (last %d lines)\n%s", filepath.Base(f), min(logTail, len(lines)), strings.Join(lines[max(0, len(lines)-logTail):], "\n"))
	}
}

func (e *env) memberLog(id string) string {
	b, _ := os.ReadFile(filepath.Join(e.dir, id+".log"))
	return string(b)
}

// leader returns the id of the current leader ("" if none).
func (e *env) leader() string {
	resp, err := e.cli.Get(e.t.Context(), "/keyshare/"+group+"/election/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

// fault records the time of a fault, for recovery times.
func (e *env) fault() {
	e.mu.Lock()
	e.faults = append(e.faults, time.Now())
	e.mu.Unlock()
}

// produce writes n keyed records at rate per second and records every
// acknowledged one. Values are "key-K:SEQ". With hotShare set, that share
// of the records has key-0.
func (e *env) produce(ctx context.Context, n, keys int, rate float64) error {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "acks": "all", "enable.idempotence": true, "linger.ms": 5, "log_level": 3,
		"topic.metadata.refresh.interval.ms": 1000}) // sees added partitions
	if err != nil {
		return err
	}
	defer p.Close()
	t := topic
	reports := make(chan kafka.Event, n)
	acksDone := make(chan error, 1)
	go func() {
		var firstErr error
		for range n {
			m := (<-reports).(*kafka.Message)
			if m.TopicPartition.Error != nil {
				firstErr = m.TopicPartition.Error
				continue
			}
			key, seqs, _ := strings.Cut(string(m.Value), ":")
			s, _ := strconv.Atoi(seqs)
			e.mu.Lock()
			e.acked = append(e.acked, ack{partition: m.TopicPartition.Partition, offset: int64(m.TopicPartition.Offset), key: key, seq: s, at: time.Now()})
			e.mu.Unlock()
		}
		acksDone <- firstErr
	}()
	seq := make([]int, keys)
	start := time.Now()
	for i := range n {
		k := (i*7919 + i/keys) % keys
		if e.hotShare > 0 && float64(i%100) < e.hotShare*100 {
			k = 0 // the hot key (its seq keeps its order)
		}
		msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &t, Partition: kafka.PartitionAny},
			Key: fmt.Appendf(nil, "key-%d", k), Value: fmt.Appendf(nil, "key-%d:%d", k, seq[k])}
		seq[k]++
		if err := p.Produce(msg, reports); err != nil {
			return err
		}
		if ahead := time.Duration(float64(i+1)/rate*float64(time.Second)) - time.Since(start); ahead > 0 {
			select {
			case <-time.After(ahead):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return <-acksDone
}

// observeCommits polls the group's committed offsets with a separate client
// until ctx ends.
func (e *env) observeCommits(ctx context.Context) {
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "group.id": group, "log_level": 3})
	if err != nil {
		e.t.Error(err)
		return
	}
	defer c.Close()
	t := topic
	for ctx.Err() == nil {
		e.mu.Lock()
		parts := e.parts
		e.mu.Unlock()
		var tps []kafka.TopicPartition
		for p := range parts {
			tps = append(tps, kafka.TopicPartition{Topic: &t, Partition: p})
		}
		sent := time.Now()
		res, err := c.Committed(tps, 2000)
		now := time.Now()
		if err == nil {
			// Every answer is kept, unchanged ones too: a commit past
			// an unhandled record is then seen again by later polls,
			// each with its own (usually narrow) window.
			for _, tp := range res {
				if tp.Offset >= 0 {
					e.mu.Lock()
					e.commits = append(e.commits, commitObs{at: now, sent: sent, partition: tp.Partition, offset: int64(tp.Offset)})
					e.mu.Unlock()
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// committedAtEnd reports whether every partition's last observed commit
// equals its end (the number of acked records of the partition).
func (e *env) committedAtEnd() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	end := map[int32]int64{}
	for _, a := range e.acked {
		end[a.partition] = max(end[a.partition], a.offset+1)
	}
	last := map[int32]int64{}
	for _, c := range e.commits {
		last[c.partition] = c.offset
	}
	for p, n := range end {
		if last[p] != n {
			return false
		}
	}
	return len(end) > 0
}

// handledLine is one line of a member's record log.
type handledLine struct {
	Member    string    `json:"member"`
	Partition int32     `json:"partition"`
	Offset    int64     `json:"offset"`
	Key       string    `json:"key"`
	Value     string    `json:"value"`
	Start     time.Time `json:"start"`
	Time      time.Time `json:"time"`
}

// result is one row of the fault matrix.
type result struct {
	Row             string
	Faults          int
	Acked           int
	Lost            int // acknowledged, never handled, not reported lost
	LostToRetention int // deleted from Kafka before it was handled, and reported
	Duplicates      int
	DupSamples      []string // the first duplicates, who ran each and when
	WorstPerFault   int
	// DupsByPrevious: of Duplicates, those first run by a member on the
	// previous release (upgrade_test.go), which WorstPerFault leaves out;
	// PreviousRuns: the member processes started on that release.
	DupsByPrevious   int
	PreviousRuns     int
	OrderViolations  int
	CommitRegression int
	CommitPastUndone int // commits provably in Kafka while a record below them was unhandled
	// CommitPastUnsure: commits whose observation window (sent, at)
	// contains the handling of a record below them; not a violation
	// (logged).
	CommitPastUnsure int
	StaleWrites      int           // writes etcd accepted from a member that was not the owner or leader
	Recovery         time.Duration // worst time from a fault to every partition's commit moving again
	Bound            int           // duplicates allowed
	Overlap          overlapResult
}

// check reads the history and computes the row's result.
func (e *env) check(row string, bound int) result {
	losses := e.readLosses()
	var stale []string
	if e.restored {
		// The writes before the restore are gone from etcd's history
		// (the restore marks it compacted), so the audit logs cannot be
		// replayed against it.
		e.t.Log("stale writes not checked: etcd's history before the restore is gone")
	} else {
		stale = e.staleWrites(e.t.Context())
	}
	for _, w := range stale {
		e.t.Errorf("stale write accepted: %s", w)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.losses = losses
	// reported says when a record was reported lost to retention (zero if
	// it was not).
	reported := func(a ack) time.Time {
		for _, l := range losses {
			if l.Partition == a.partition && l.Covers(a.offset, ledger.Hash([]byte(a.key), a.offset)) {
				return l.At
			}
		}
		return time.Time{}
	}
	r := result{Row: row, Faults: len(e.faults), Acked: len(e.acked), Bound: bound, StaleWrites: len(stale)}
	files, _ := filepath.Glob(filepath.Join(e.dir, "*.jsonl"))
	var lines []handledLine
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			e.t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var l handledLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				continue // a line cut by SIGKILL
			}
			lines = append(lines, l)
		}
		fh.Close()
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].Time.Before(lines[j].Time) })
	type id struct {
		p int32
		o int64
	}
	first := map[id]time.Time{}
	firstBy := map[id]handledLine{}
	seqs := map[string][]int{}
	for _, l := range lines {
		k := id{l.Partition, l.Offset}
		if _, seen := first[k]; seen {
			r.Duplicates++
			if len(r.DupSamples) < maxDupSamples {
				f := firstBy[k]
				by := f.Member
				if e.onPrevious(f.Member, f.Start) {
					by += " (previous release)"
				}
				r.DupSamples = append(r.DupSamples, fmt.Sprintf("%d/%d %s: %s started %s ended %s, again %s started %s ended %s",
					l.Partition, l.Offset, l.Key, by, f.Start.Format(stamp), f.Time.Format(stamp), l.Member, l.Start.Format(stamp), l.Time.Format(stamp)))
			}
			continue
		}
		first[k] = l.Time
		firstBy[k] = l
		_, s, _ := strings.Cut(l.Value, ":")
		n, _ := strconv.Atoi(s)
		pk := fmt.Sprintf("%d/%s", l.Partition, l.Key)
		seqs[pk] = append(seqs[pk], n)
	}
	for _, a := range e.acked {
		if _, ok := first[id{a.partition, a.offset}]; ok {
			continue
		}
		if at := reported(a); !at.IsZero() {
			r.LostToRetention++
			first[id{a.partition, a.offset}] = at // accounted for from the report on
		} else {
			r.Lost++
		}
	}
	for _, s := range seqs {
		for i := 1; i < len(s); i++ {
			if s[i] < s[i-1] {
				r.OrderViolations++
			}
		}
	}
	byPart := map[int32][]ack{}
	for _, a := range e.acked {
		byPart[a.partition] = append(byPart[a.partition], a)
	}
	last := map[int32]int64{}
	for _, c := range e.commits {
		if c.offset < last[c.partition] {
			r.CommitRegression++
		}
		last[c.partition] = c.offset
	}
	r.CommitPastUndone, r.CommitPastUnsure = e.commitsPastUnhandled(byPart, func(p int32, o int64) (time.Time, bool) {
		t, ok := first[id{p, o}]
		return t, ok
	})
	// Recovery: from a fault until everything acknowledged before it is
	// committed (in every partition). Without faults this is just the
	// commit latency; compare with the baseline row.
	points := e.faults
	if len(points) == 0 && len(e.acked) > 0 {
		points = []time.Time{e.acked[len(e.acked)/4].at}
	}
	for _, f := range points {
		need := map[int32]int64{}
		for _, a := range e.acked {
			if !a.at.After(f) {
				need[a.partition] = max(need[a.partition], a.offset+1)
			}
		}
		var done time.Time
		for p, n := range need {
			for _, c := range e.commits {
				if c.partition == p && c.offset >= n && c.at.After(f) {
					if c.at.After(done) {
						done = c.at
					}
					break
				}
			}
		}
		if !done.IsZero() {
			r.Recovery = max(r.Recovery, done.Sub(f))
		}
	}
	perFault, byPrevious := duplicatesPerFault(lines, e.faults, e.onPrevious)
	for _, n := range perFault {
		r.WorstPerFault = max(r.WorstPerFault, n)
	}
	r.DupsByPrevious = byPrevious
	for _, run := range e.runs {
		if run.previous {
			r.PreviousRuns++
		}
	}
	r.Overlap = overlap(e.grants, e.plans, lines, e.onPrevious)
	return r
}

// duplicatesPerFault attributes each duplicate in lines (sorted by time)
// to the latest fault before it was run again (those before the first
// fault to none), apart from those first run on the previous release,
// which it counts: previous reports whether a member was running the
// previous release at a moment.
func duplicatesPerFault(lines []handledLine, faults []time.Time, previous func(member string, at time.Time) bool) (perFault []int, byPrevious int) {
	type id struct {
		p int32
		o int64
	}
	perFault = make([]int, len(faults))
	first := map[id]handledLine{}
	for _, l := range lines {
		k := id{l.Partition, l.Offset}
		f, seen := first[k]
		if !seen {
			first[k] = l
			continue
		}
		if previous(f.Member, f.Start) {
			byPrevious++
			continue
		}
		for i := len(faults) - 1; i >= 0; i-- {
			if !faults[i].After(l.Time) {
				perFault[i]++
				break
			}
		}
	}
	return perFault, byPrevious
}

func (r result) String() string {
	previous := ""
	if r.DupsByPrevious > 0 {
		previous = fmt.Sprintf(", %d first run by the previous release's %d processes", r.DupsByPrevious, r.PreviousRuns)
	}
	return fmt.Sprintf("%-28s faults %d  acked %d  lost %d  lost to retention (reported) %d  dups %d (worst fault %d, bound %d per fault%s)  order %d  regressions %d  commit-past-undone %d (unsure %d)  stale writes %d  recovery %s  %s",
		r.Row, r.Faults, r.Acked, r.Lost, r.LostToRetention, r.Duplicates, r.WorstPerFault, r.Bound, previous, r.OrderViolations, r.CommitRegression, r.CommitPastUndone, r.CommitPastUnsure, r.StaleWrites, r.Recovery.Round(10*time.Millisecond), r.Overlap)
}

// commitsPastUnhandled counts the distinct observed commits (partition,
// offset) that passed an acknowledged record not yet handled (nor reported
// lost), by when the record was first handled:
//
//   - after the observer had the answer (or never): the commit was in
//     Kafka while the record was unhandled, a violation;
//   - between the observer's request and its answer: unsure. The broker
//     read the commit at some moment of that window, perhaps after the
//     record was handled and the commit made. Such a commit, if it did pass
//     an unhandled record, is caught by the next poll (every 50 ms, each
//     answer kept) unless the record was handled before that poll was sent.
//
// handled is when a record was first handled (or reported lost).
func (e *env) commitsPastUnhandled(byPart map[int32][]ack, handled func(int32, int64) (time.Time, bool)) (bad, unsure int) {
	never := time.Unix(1<<40, 0)
	// Per partition, acks by offset and the latest first-handling among
	// the acks up to each.
	type part struct {
		acks []ack
		upTo []time.Time // upTo[i]: latest handling of acks[0..i]
	}
	parts := map[int32]part{}
	for p, as := range byPart {
		as = slices.Clone(as)
		slices.SortFunc(as, func(a, b ack) int { return cmp.Compare(a.offset, b.offset) })
		var pt part
		var latest time.Time
		for _, a := range as {
			t, ok := handled(a.partition, a.offset)
			if !ok {
				t = never
			}
			if t.After(latest) {
				latest = t
			}
			pt.acks = append(pt.acks, a)
			pt.upTo = append(pt.upTo, latest)
		}
		parts[p] = pt
	}
	type key struct {
		p int32
		o int64
	}
	counted := map[key]string{}
	// The widest windows, and the handlings inside windows, show how
	// often the timing alone leaves a commit unsure.
	var widest time.Duration
	wide := 0
	for _, c := range e.commits {
		widest = max(widest, c.at.Sub(c.sent))
		if c.at.Sub(c.sent) > 500*time.Millisecond {
			wide++
		}
	}
	if len(e.commits) > 0 {
		e.t.Logf("commit observations: %d, widest window %s, %d wider than 500 ms", len(e.commits), widest.Round(time.Millisecond), wide)
	}
	for _, c := range e.commits {
		pt := parts[c.partition]
		n, _ := slices.BinarySearchFunc(pt.acks, c.offset, func(a ack, o int64) int { return cmp.Compare(a.offset, o) })
		if n == 0 || !pt.upTo[n-1].After(c.sent) {
			continue
		}
		verdict := "unsure"
		if pt.upTo[n-1].After(c.at) {
			verdict = "bad"
		}
		// One commit seen by many polls counts once. (A later poll has
		// a later answer, so it never turns a violation into unsure.)
		k := key{c.partition, c.offset}
		if counted[k] != "" {
			continue
		}
		counted[k] = verdict
		if verdict == "bad" {
			bad++
		} else {
			unsure++
		}
		// The first record below the commit handled after the request.
		for _, a := range pt.acks[:n] {
			t, ok := handled(a.partition, a.offset)
			if ok && !t.After(c.sent) {
				continue
			}
			h := "never"
			if ok {
				h = t.Format("15:04:05.000") + fmt.Sprintf(" (%s after the request)", t.Sub(c.sent).Round(time.Millisecond))
			}
			e.t.Logf("%s: commit of %d in partition %d observed by a request sent at %s and answered at %s (window %s); record %d below it handled at %s",
				verdict, c.offset, c.partition, c.sent.Format("15:04:05.000"), c.at.Format("15:04:05.000"), c.at.Sub(c.sent).Round(time.Millisecond), a.offset, h)
			break
		}
	}
	return bad, unsure
}
