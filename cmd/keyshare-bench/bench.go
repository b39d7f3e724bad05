package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/devcluster"
)

// benchCommand measures keyshare against a vanilla confluent-kafka-go
// consumer-group member on the same data in the same run.
type benchCommand struct {
	runs  int
	write string
	quick bool
	only  string
	prof  string
	// records and memberProfile are the throughput scenario's: the records
	// it reads (0: its default) and where its one-member reader writes
	// CPU and allocation profiles.
	records       int
	memberProfile string
	tries         listFlag
	compare       listFlag
	kafka         string // the bundled cluster's broker: kfake or apache

	cl      *devcluster.Cluster
	brokers string
	etcd    string
	groups  atomic.Int64
	out     strings.Builder
}

func (c *benchCommand) Run(ctx context.Context, args []string) error {
	if err := c.parse(args); err != nil {
		return err
	}
	cl, err := devcluster.StartCluster(devcluster.ClusterOptions{EtcdAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", Kafka: c.kafka, Topics: benchTopicSet()})
	if err != nil {
		return err
	}
	defer cl.Close()
	c.cl, c.brokers, c.etcd = cl, cl.Brokers, cl.Etcd.ClientURL()
	c.printIntro()
	if c.prof != "" {
		f, err := os.Create(c.prof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	scenarios := []struct {
		name string
		run  func(context.Context) error
	}{
		{"throughput", c.throughput},                                                // bench_throughput.go
		{"pc", c.parallelConsumerWorkload}, {"pc-http", c.parallelConsumerOverHTTP}, // bench_deliver.go
		{"scale", c.scaleOut}, {"hotkey", c.hotKey},
		{"etcd", c.etcdCost}, {"fetch", c.fetchAmplification}, {"pauses", c.pauses}, {"memory", c.memory},
		{"batch", c.batchSink},    // bench_batch.go
		{"groups", c.largeGroups}, // bench_groups.go
		{"skew", c.skew},          // bench_skew.go
	}
	for _, s := range scenarios {
		if c.only != "" && !slices.Contains(strings.Split(c.only, ","), s.name) {
			continue
		}
		if err := s.run(ctx); err != nil {
			return err
		}
	}
	if c.write != "" {
		return os.WriteFile(c.write, []byte(c.out.String()), 0o644)
	}
	return nil
}

// parse reads the bench's flags and checks their values.
func (c *benchCommand) parse(args []string) error {
	fs := flag.NewFlagSet("keyshare-bench", flag.ContinueOnError)
	fs.IntVar(&c.runs, "runs", 3, "runs per figure (the median and the spread are reported)")
	fs.StringVar(&c.write, "write", "", "also write the report (Markdown) to this file; docs/benchmarks.md takes its figures from it")
	fs.BoolVar(&c.quick, "quick", false, "smaller workloads (a smoke test of the benchmark itself)")
	fs.StringVar(&c.prof, "cpuprofile", "", "write a CPU profile of the benchmark process to this file")
	fs.IntVar(&c.records, "records", 0, "records the throughput scenario reads (default 1,000,000; 100,000 with --quick)")
	fs.StringVar(&c.memberProfile, "member-profile", "", "write CPU and allocation profiles of the throughput scenario's one member (keyshare-1.cpu.pprof, keyshare-1.allocs.pprof) and of the first of its four (keyshare-4.*) to this directory")
	fs.Var(&c.compare, "compare", "another keyshare-bench binary (one built from another tree) whose members the throughput scenario also runs, with defaults, in turns with this one's: rows of one member and four on one partition, and one member on four partitions (repeatable)")
	fs.Var(&c.tries, "try", "librdkafka settings (prop=value,prop=value) the throughput scenario also tries on a bare loop and one member, a row each (repeatable)")
	fs.StringVar(&c.only, "only", "", "run only these scenarios, comma-separated: throughput (one partition, then four, read by kcat, a bare client and keyshare members), pc, pc-http (pc's workload at an HTTP endpoint, through keyshare-bench member --deliver), scale, hotkey, etcd, fetch, pauses, memory, batch, groups (large groups: P up to 4,096, M up to 200), skew (skewed load, balance width against load)")
	cli.KafkaFlag(fs, &c.kafka)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if err := cli.CheckKafkaFlag(c.kafka); err != nil {
		return err
	}
	if c.runs < 1 {
		return cli.Usage(fmt.Errorf("--runs %d: want at least 1", c.runs))
	}
	if c.runs > 10 {
		return cli.Usage(fmt.Errorf("--runs %d: at most 10", c.runs))
	}
	return nil
}

// benchTopicSet is every scenario's topics with their partition counts,
// created with the bundled cluster.
func benchTopicSet() map[string]int32 {
	topics := map[string]int32{"pc-uniform": 1, "pc-zipf": 1, "scale": 1, "hot": 1, "hot-deep": 1, "rate": 1, "amp-1": 1, "amp-4": 4, "amp-12": 12, "batch": 1, "batch-rate": 1, throughputTopic: 1, throughput4Topic: 4, latencyTopic: 1, deliverTopic: 1}
	for name, parts := range skewTopics { // bench_skew.go
		topics[name] = parts
	}
	for i := range 10 {
		topics[fmt.Sprintf("pauses-%d", i)] = 2
		topics[fmt.Sprintf("memory-%d", i)] = 1
	}
	return topics
}

// printIntro prints the report's heading: where, on what broker and how
// the figures were measured.
func (c *benchCommand) printIntro() {
	host, _ := os.Hostname()
	c.printf("# keyshare benchmarks\n\nMeasured by `make bench` (`keyshare-bench --runs %d`) on %s: %d CPUs, %s, %s/%s, %s.\n",
		c.runs, host, runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH, time.Now().UTC().Format("2006-01-02"))
	if c.kafka == "apache" {
		c.printf("Broker: Apache Kafka %s (one KRaft node in a JVM, internal/devcluster) through librdkafka; etcd embedded.\n", devcluster.ApacheKafkaVersion)
	} else {
		c.printf("Broker: kfake (franz-go's in-process Kafka-protocol broker) through librdkafka; etcd embedded. `--kafka apache` runs the same scenarios on Apache Kafka %s.\n", devcluster.ApacheKafkaVersion)
	}
	c.printf("Each figure is the median of %d runs with the range (min–max) in brackets, unless it says otherwise.\n\n", c.runs)
}

func (c *benchCommand) printf(format string, a ...any) {
	s := fmt.Sprintf(format, a...)
	fmt.Print(s)
	c.out.WriteString(s)
}

// uniformWork gives record offset o a work time in [0, maxD], the same for
// every consumer that handles it, so that runs do the same total work.
func uniformWork(maxD time.Duration) func(m *kafka.Message) time.Duration {
	return func(m *kafka.Message) time.Duration {
		x := uint64(m.TopicPartition.Offset)*0x9E3779B97F4A7C15 + uint64(m.TopicPartition.Partition)
		x ^= x >> 31
		x *= 0xBF58476D1CE4E5B9
		x ^= x >> 29
		return time.Duration(x % uint64(maxD+1))
	}
}

// produceKeys writes n records to topic; keyOf picks the key of record i.
func (c *benchCommand) produceKeys(topic string, n int, keyOf func(i int) string) error {
	p, err := c.producer(topic)
	if err != nil {
		return err
	}
	defer p.Close()
	return produceWith(p, topic, n, keyOf)
}

// producer returns a producer connected to the broker that knows topic's
// partitions, so that a scenario timing its records from before they are
// produced counts neither the connection nor the first metadata request.
func (c *benchCommand) producer(topic string) (*kafka.Producer, error) {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "linger.ms": 5, "log_level": 3})
	if err != nil {
		return nil, err
	}
	if _, err := p.GetMetadata(&topic, false, 10000); err != nil {
		p.Close()
		return nil, fmt.Errorf("metadata of topic %s: %w", topic, err)
	}
	return p, nil
}

// produceWith writes n records to topic with p, and waits for their acks.
func produceWith(p *kafka.Producer, topic string, n int, keyOf func(i int) string) error {
	acks := make(chan kafka.Event, n)
	for i := range n {
		k := keyOf(i)
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: []byte(k), Value: []byte(k)}, acks); err != nil {
			return err
		}
	}
	for range n {
		if m := (<-acks).(*kafka.Message); m.TopicPartition.Error != nil {
			return m.TopicPartition.Error
		}
	}
	return nil
}

// span records the first and last handling times and counts handled records.
type span struct {
	mu          sync.Mutex
	first, last time.Time
	n           atomic.Int64
}

func (s *span) hit() {
	now := time.Now()
	s.mu.Lock()
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	s.mu.Unlock()
	s.n.Add(1)
}

// wait returns once n records were handled, or an error after d.
func (s *span) wait(n int64, d time.Duration) error {
	deadline := time.Now().Add(d)
	for s.n.Load() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %d of %d records handled", s.n.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

func (s *span) elapsed() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Sub(s.first)
}

// members runs m keyshare members of a fresh group on topic; they handle
// records with handle and stop when ctx ends.
type members struct {
	group  string
	cs     []*consumer.Consumer
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (c *benchCommand) startMembers(topic string, m, concurrency int, reset consumer.OffsetReset, handle consumer.Handler) (*members, error) {
	return c.startMembersWith(topic, m, concurrency, reset, func(cfg *consumer.Config) { cfg.Handler = handle })
}

// startMembersWith is startMembers with the handler (or batch handler)
// and any other settings given by set.
func (c *benchCommand) startMembersWith(topic string, m, concurrency int, reset consumer.OffsetReset, set func(*consumer.Config)) (*members, error) {
	group := fmt.Sprintf("bench-%d", c.groups.Add(1))
	ctx, cancel := context.WithCancel(context.Background())
	ms := &members{group: group, cancel: cancel}
	for i := range m {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		cfg := consumer.DefaultConfig()
		cfg.Group, cfg.Topics, cfg.MemberID = group, []string{topic}, fmt.Sprintf("b%d", i)
		cfg.Kafka = kafka.ConfigMap{"bootstrap.servers": c.brokers, "log_level": 3, "fetch.wait.max.ms": 20}
		cfg.Concurrency, cfg.MaxInFlight = concurrency, max(1000, 4*concurrency)
		cfg.AutoOffsetReset = reset
		cfg.SessionTTL, cfg.RebalanceDebounce = 3*time.Second, 50*time.Millisecond
		cfg.Logger = hclog.NewNullLogger()
		set(&cfg)
		k, err := consumer.New(cli, cfg)
		if err != nil {
			return nil, err
		}
		ms.cs = append(ms.cs, k)
		ms.wg.Add(1)
		go func() {
			defer ms.wg.Done()
			defer cli.Close()
			if err := k.Run(ctx); err != nil {
				fmt.Fprintf(os.Stderr, "bench member: %v\n", err)
			}
		}()
	}
	// Wait until every member owns a range and the assignment is stable.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ready, gens := true, map[int64]bool{}
		for _, k := range ms.cs {
			st := k.Status()
			ready = ready && len(st.Ranges) > 0
			gens[st.Generation] = true
			for _, r := range st.Ranges {
				ready = ready && r.State == "active"
			}
		}
		if ready && len(gens) == 1 {
			time.Sleep(300 * time.Millisecond)
			return ms, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	var states []string
	for _, k := range ms.cs {
		st := k.Status()
		var rs []string
		for _, r := range st.Ranges {
			rs = append(rs, fmt.Sprintf("%s/%d[%d,%d) %s", r.Topic, r.Partition, r.Lo, r.Hi, r.State))
		}
		states = append(states, fmt.Sprintf("%s: generation %d, ranges %v", st.MemberID, st.Generation, rs))
	}
	ms.stop()
	return nil, fmt.Errorf("bench: %d members did not settle within 60s: %s", m, strings.Join(states, "; "))
}

func (ms *members) stop() {
	ms.cancel()
	ms.wg.Wait()
}

// runKeyshare handles the n records already in topic with m members of
// concurrency each; it returns the time from the first record handled to the
// last.
func (c *benchCommand) runKeyshare(topic string, n, m, concurrency int, work func(*kafka.Message) time.Duration) (time.Duration, error) {
	var s span
	ms, err := c.startMembers(topic, m, concurrency, "earliest", func(ctx context.Context, msg *kafka.Message) error {
		if err := worksleep.Sleep(ctx, work(msg)); err != nil {
			return err
		}
		s.hit()
		return nil
	})
	if err != nil {
		return 0, err
	}
	defer ms.stop()
	if err := s.wait(int64(n), 10*time.Minute); err != nil {
		return 0, err
	}
	return s.elapsed(), nil
}

// runVanilla handles the n records of topic with one confluent-kafka-go
// consumer-group member, one record at a time in partition order (the
// partition cap: one member per partition).
func (c *benchCommand) runVanilla(topic string, n int, work func(*kafka.Message) time.Duration) (time.Duration, error) {
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": c.brokers, "group.id": fmt.Sprintf("vanilla-%d", c.groups.Add(1)), "auto.offset.reset": "earliest", "log_level": 3})
	if err != nil {
		return 0, err
	}
	defer kc.Close()
	if err := kc.SubscribeTopics([]string{topic}, nil); err != nil {
		return 0, err
	}
	var s span
	for s.n.Load() < int64(n) {
		m, err := kc.ReadMessage(30 * time.Second)
		if err != nil {
			return 0, fmt.Errorf("vanilla consumer: %w", err)
		}
		_ = worksleep.Sleep(context.Background(), work(m))
		s.hit()
	}
	return s.elapsed(), nil
}

// stats is the median and the range of some durations.
type stats struct{ med, lo, hi time.Duration }

func summarize(ds []time.Duration) stats {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return stats{med: ds[len(ds)/2], lo: ds[0], hi: ds[len(ds)-1]}
}

func (s stats) String() string {
	if s.lo == s.hi {
		return fmt.Sprintf("%.2f s", s.med.Seconds())
	}
	return fmt.Sprintf("%.2f s [%.2f–%.2f]", s.med.Seconds(), s.lo.Seconds(), s.hi.Seconds())
}

func (c *benchCommand) repeat(f func() (time.Duration, error)) (stats, error) {
	var ds []time.Duration
	for range c.runs {
		d, err := f()
		if err != nil {
			return stats{}, err
		}
		ds = append(ds, d)
	}
	return summarize(ds), nil
}
