// Command peerbench runs keyshare and its peers — Confluent Parallel
// Consumer, Kafka share groups and a plain consumer group — on one Apache
// Kafka 4.x broker, on the same produced data, in one run, and writes their
// tables into docs/benchmarks.md (make bench-peers).
//
// Every peer writes the same record log (bench/peers/checker), which one
// checker measures: time from the first record handled to the last, per-key
// order violations, duplicates and lost records, and whether the group's
// committed offset (for share groups: the share-partition start offset)
// reached the end of the topic.
//
// Knobs (flags, or these environment variables as their defaults):
//
//	--records   PEERS_RECORDS    records per workload (10000)
//	--runs      PEERS_RUNS       runs per figure; the median and range are shown (3)
//	--workloads PEERS_WORKLOADS  uniform,zipf,hot,4p
//	--peers     PEERS_PEERS      pc,share,plain,keyshare
//	--failures  PEERS_FAILURES   crash,scaleout ("none" to skip)
//	--failure-runs PEERS_FAILURE_RUNS runs per failure row (the same as --runs)
//	--stream-rate, --stream-duration  PEERS_STREAM_RATE (1000), PEERS_STREAM_DURATION (10s):
//	                             the records produced during each failure run
//	--quick                      2000 records, 1 run (a smoke test in a few minutes)
package main

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/bench/peers/checker"
	"github.com/keyshare/keyshare/internal/devcluster"
)

// Versions of the peers, as built by bench/peers/pom.xml and go.mod.
const (
	pcVersion          = "Confluent Parallel Consumer 0.5.3.3 (kafka-clients 3.9.1)"
	shareClientVersion = "kafka-clients 4.2.0 KafkaShareConsumer"
)

type bench struct {
	records   int
	runs      int
	workloads []string
	peers     []string
	failures  []string
	write     string
	peersDir  string
	driver    string
	dir       string
	brokers   string
	etcd      string
	workMax   int64
	groups    int
	out       bytes.Buffer
	verbose   bool
	keep      bool
	shareArgs string
	spso      string // the last share check's start offsets
	started   time.Time

	streamRate   int
	streamDur    time.Duration
	nFailureRuns int
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func main() {
	var b bench
	var wl, pe, fa string
	var quick bool
	n, _ := strconv.Atoi(env("PEERS_RECORDS", "10000"))
	r, _ := strconv.Atoi(env("PEERS_RUNS", "3"))
	flag.IntVar(&b.records, "records", n, "records per workload")
	flag.IntVar(&b.runs, "runs", r, "runs per figure")
	flag.StringVar(&wl, "workloads", env("PEERS_WORKLOADS", "uniform,zipf,hot,4p"), "workloads to run")
	flag.StringVar(&pe, "peers", env("PEERS_PEERS", "pc,share,plain,keyshare"), "peers to run")
	flag.StringVar(&fa, "failures", env("PEERS_FAILURES", "crash,scaleout"), `failure runs ("none" to skip)`)
	sr, _ := strconv.Atoi(env("PEERS_STREAM_RATE", "1000"))
	sd, _ := time.ParseDuration(env("PEERS_STREAM_DURATION", "10s"))
	flag.IntVar(&b.streamRate, "stream-rate", sr, "failure runs: records/s produced while the peer runs")
	flag.DurationVar(&b.streamDur, "stream-duration", sd, "failure runs: how long records are produced")
	fr, _ := strconv.Atoi(env("PEERS_FAILURE_RUNS", "0"))
	flag.IntVar(&b.nFailureRuns, "failure-runs", fr, "runs per failure row (0: the same as --runs)")
	flag.BoolVar(&quick, "quick", false, "2000 records and 1 run: a smoke test")
	flag.StringVar(&b.write, "write", "", "write the section into this Markdown file (between its bench-peers markers, or appended)")
	flag.StringVar(&b.peersDir, "peers-dir", "bench/peers", "the built Maven project of the Java drivers")
	flag.StringVar(&b.driver, "driver", "bin/peerdriver", "the Go driver binary")
	flag.StringVar(&b.brokers, "brokers", "", "use this running Kafka 4.x broker instead of starting one")
	flag.Int64Var(&b.workMax, "work-max-us", 5000, "work per record is uniform in [0, this] µs")
	flag.BoolVar(&b.verbose, "v", false, "print progress")
	flag.StringVar(&b.shareArgs, "share-args", env("PEERS_SHARE_ARGS", ""), "extra flags for the share-group driver, e.g. \"--max-poll-records 1\"")
	flag.BoolVar(&b.keep, "keep", false, "keep the work directory (record logs, driver output) and print its path")
	flag.Parse()
	if quick {
		b.records, b.runs, b.streamRate, b.streamDur = 2000, 1, 500, 6*time.Second
	}
	if b.nFailureRuns <= 0 || quick {
		b.nFailureRuns = b.runs
	}
	b.workloads, b.peers = strings.Split(wl, ","), strings.Split(pe, ",")
	if wl == "none" {
		b.workloads = nil
	}
	if fa != "none" && fa != "" {
		b.failures = strings.Split(fa, ",")
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		killAll()
		if stopKafka != nil {
			stopKafka()
		}
		fmt.Fprintln(os.Stderr, "peerbench: interrupted; driver processes killed")
		os.Exit(130)
	}()
	if err := b.run(); err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func (b *bench) logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

func loadavg() string {
	s, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(s))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func (b *bench) run() error {
	b.started = time.Now()
	var err error
	if b.dir, err = os.MkdirTemp("", "bench-peers-"); err != nil {
		return err
	}
	if b.keep {
		b.logf("work directory: %s", b.dir)
	} else {
		defer os.RemoveAll(b.dir)
	}
	if err := b.checkDrivers(); err != nil {
		return err
	}
	e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: filepath.Join(b.dir, "etcd")})
	if err != nil {
		return err
	}
	defer e.Close()
	b.etcd = e.ClientURL()
	wls := b.selectedWorkloads()
	closeKafka, err := b.startKafka(wls)
	if err != nil {
		return err
	}
	defer closeKafka()
	load0, t0 := loadavg(), time.Now()
	var body bytes.Buffer
	var goals []string
	for i := range wls {
		g, err := b.workload(&body, &wls[i])
		if err != nil {
			return err
		}
		goals = append(goals, g...)
	}
	if len(b.failures) > 0 {
		if err := b.failureRuns(&body); err != nil {
			return err
		}
	}
	b.writeIntro(t0, load0)
	b.out.Write(body.Bytes())
	if len(goals) > 0 {
		fmt.Fprintf(&b.out, "### Goals for keyshare, at the same total concurrency\n\nThroughput ≥ Parallel Consumer's, within 10%% of share groups' (ratio of records/s, medians; for the blocked key, of the other keys' time), 0 order violations.\n\n| workload | keyshare | ÷ Parallel Consumer | ÷ share group |\n|---|---|---|---|\n")
		for _, g := range goals {
			fmt.Fprintln(&b.out, g)
		}
		fmt.Fprintln(&b.out)
	}
	fmt.Print(b.out.String())
	if b.write != "" {
		return writeSection(b.write, b.out.String())
	}
	return nil
}

// checkDrivers fails unless the peers' drivers are built.
func (b *bench) checkDrivers() error {
	for _, p := range []string{b.driver, filepath.Join(b.peersDir, "pc/target/peers-pc.jar"), filepath.Join(b.peersDir, "share/target/peers-share.jar")} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w: build the drivers first (make bench-peers does)", err)
		}
	}
	return nil
}

// startKafka starts an Apache Kafka broker holding the workloads' topics,
// or, given --brokers, creates them there under names unique to this run.
// It returns what stops the broker it started.
func (b *bench) startKafka(wls []workload) (stop func(), err error) {
	topics := map[string]int32{}
	if b.brokers != "" {
		suffix := fmt.Sprintf("-%d", time.Now().Unix())
		for i := range wls {
			wls[i].topic += suffix
			topics[wls[i].topic] = wls[i].partitions
		}
		return func() {}, devcluster.CreateTopics(b.brokers, topics, 1)
	}
	for _, w := range wls {
		topics[w.topic] = w.partitions
	}
	b.logf("starting Apache Kafka %s", devcluster.ApacheKafkaVersion)
	k, err := devcluster.StartApacheKafka(devcluster.ApacheKafkaOptions{Dir: filepath.Join(b.dir, "kafka"), Topics: topics})
	if err != nil {
		return nil, err
	}
	stopKafka = k.Close
	b.brokers = k.Brokers()
	return k.Close, nil
}

// writeIntro writes the report's opening paragraphs: where and how the
// figures were measured, from t0 with load average load0.
func (b *bench) writeIntro(t0 time.Time, load0 string) {
	host, _ := os.Hostname()
	// The heading is docs/benchmarks.md's own, outside the markers.
	fmt.Fprintf(&b.out, "Measured by `make bench-peers` (`peerbench --records %d --runs %d`) on %s: %d CPUs, %s, %s, from %s UTC for %s. Load average (1, 5, 15 min) at the start: %s; at the end: %s (the machine is shared).\n\n",
		b.records, b.runs, host, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02"), t0.UTC().Format("15:04"), time.Since(t0).Round(time.Second), load0, loadavg())
	fmt.Fprintf(&b.out, "One Apache Kafka %s broker (KRaft, one node, from Maven Central's jars, internal/devcluster), one embedded etcd. Peers: %s; share groups with %s; a plain consumer group with confluent-kafka-go %s (librdkafka %s); keyshare members from this tree. Each instance is its own process; the instances of a run start together and time counts from the first record handled to the last, so joining and the first rebalances are inside it.\n\n",
		devcluster.ApacheKafkaVersion, pcVersion, shareClientVersion, ckgVersion(), librdkafkaVersion())
	fmt.Fprintf(&b.out, "Work per record: a sleep uniform in 0–%.0f ms, a hash of the record's partition and offset, the same in every driver (Σwork below). × ideal = time ÷ (Σwork ÷ total concurrency). Order violations: records whose first handling started before the previous record of the same key (same partition) had finished its first handling. Duplicates: handlings beyond a record's first. Committed = end: after the instances stopped gracefully, the group's committed offset equals the end offset on every partition; for share groups, the broker confirmed every acknowledgement (the consumers' commit callbacks), with the lag and share-partition start offset from Admin.listShareGroupOffsets beside it. Figures are medians of %d runs with the range in brackets.\n\n", float64(b.workMax)/1000, b.runs)
}

func ckgVersion() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/confluentinc/confluent-kafka-go/v2").Output()
	if err != nil {
		return "v2"
	}
	return strings.TrimSpace(string(out))
}

func librdkafkaVersion() string {
	_, s := kafka.LibraryVersion()
	return s
}

// stopKafka stops the broker peerbench started, if any, when interrupted.
var stopKafka func()

const beginMarker, endMarker = "<!-- bench-peers: written by make bench-peers -->", "<!-- /bench-peers -->"

// writeSection replaces the text between the markers in path, or appends it
// with the markers; the rest of the file is kept.
func writeSection(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	s := string(old)
	block := beginMarker + "\n" + section + endMarker + "\n"
	if i, j := strings.Index(s, beginMarker), strings.Index(s, endMarker); i >= 0 && j > i {
		s = s[:i] + block + s[j+len(endMarker):]
		s = strings.Replace(s, endMarker+"\n\n", endMarker+"\n", 1)
	} else {
		if s != "" && !strings.HasSuffix(s, "\n\n") {
			s += "\n"
		}
		s += block
	}
	return os.WriteFile(path, []byte(s), 0o644)
}

// workload is a topic of produced records and what every peer does on it.
type workload struct {
	name, title, topic string
	partitions         int32
	key                func(i int) string
	block              bool

	end      map[int32]int64
	sumWork  time.Duration
	keyFloor time.Duration // the most work of any one key: no key-ordered consumer can finish sooner
	blockAt  string        // PARTITION:OFFSET:MILLIS
}

const blockMillis = 5000

func (b *bench) selectedWorkloads() []workload {
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 5)), 1.2, 1, 999)
	zipfKeys := make([]string, b.records)
	for i := range zipfKeys {
		zipfKeys[i] = fmt.Sprintf("key-%d", zipf.Uint64())
	}
	uniform := func(i int) string { return fmt.Sprintf("key-%d", i%1000) }
	all := []workload{
		{name: "uniform", title: "Parallel Consumer's workload: 1,000 keys, 1 partition", topic: "peers-uniform", partitions: 1, key: uniform},
		{name: "zipf", title: "Zipf keys (s = 1.2 over 1,000), 1 partition", topic: "peers-zipf", partitions: 1, key: func(i int) string { return zipfKeys[i] }},
		{name: "hot", title: "One key blocked for 5 s: 1,000 keys, 1 partition, the first record of key-0 takes 5 s more", topic: "peers-hot", partitions: 1, key: uniform, block: true},
		{name: "4p", title: "4 partitions, 1,000 keys", topic: "peers-4p", partitions: 4, key: uniform},
	}
	var out []workload
	for _, w := range all {
		if slices.Contains(b.workloads, w.name) {
			out = append(out, w)
		}
	}
	return out
}

// produce writes the workload's records and computes its work.
// With rate > 0 it paces the records at rate a second.
func (b *bench) produce(w *workload, rate int) error {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": b.brokers, "linger.ms": 5, "log_level": 3, "acks": "all"})
	if err != nil {
		return err
	}
	defer p.Close()
	acks := make(chan kafka.Event, b.records)
	t0 := time.Now()
	for i := range b.records {
		if rate > 0 {
			if d := time.Until(t0.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
				time.Sleep(d)
			}
		}
		k := w.key(i)
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: kafka.PartitionAny}, Key: []byte(k), Value: []byte(k)}, acks); err != nil {
			return err
		}
	}
	w.end = map[int32]int64{}
	perKey := map[string]time.Duration{}
	for range b.records {
		m := (<-acks).(*kafka.Message)
		if m.TopicPartition.Error != nil {
			return m.TopicPartition.Error
		}
		tp := m.TopicPartition
		w.end[tp.Partition] = max(w.end[tp.Partition], int64(tp.Offset)+1)
		d := time.Duration(checker.WorkMicros(tp.Partition, int64(tp.Offset), b.workMax)) * time.Microsecond
		if w.block && string(m.Key) == "key-0" && tp.Partition == 0 && (w.blockAt == "" || int64(tp.Offset) < blockOffset(w.blockAt)) {
			w.blockAt = fmt.Sprintf("0:%d:%d", tp.Offset, blockMillis)
		}
		w.sumWork += d
		perKey[fmt.Sprintf("%d/%s", tp.Partition, m.Key)] += d
	}
	if w.blockAt != "" {
		w.sumWork += blockMillis * time.Millisecond
		perKey["0/key-0"] += blockMillis * time.Millisecond
	}
	for _, d := range perKey {
		w.keyFloor = max(w.keyFloor, d)
	}
	for pt := range w.partitions {
		if w.end[pt] == 0 {
			w.end[pt] = 0
		}
	}
	return nil
}

func blockOffset(s string) int64 {
	f := strings.Split(s, ":")
	o, _ := strconv.ParseInt(f[1], 10, 64)
	return o
}
