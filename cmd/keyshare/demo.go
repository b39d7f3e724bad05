package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/loadgen"
	"github.com/keyshare/keyshare/cmd/internal/recordlog"
	"github.com/keyshare/keyshare/internal/devcluster"
	"github.com/keyshare/keyshare/schema"
)

type demoCommand struct {
	duration          time.Duration
	members, parts    int
	records, keyCount int
	work              time.Duration
	kafka             string
	keep              bool
}

const demoTopic, demoGroup = "demo-orders", "demo"

func (c *demoCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "how long records are produced; the demo then waits for the members to finish")
	fs.IntVar(&c.members, "members", 3, "member processes at the start")
	fs.IntVar(&c.parts, "partitions", 2, "partitions of the demo topic")
	fs.IntVar(&c.records, "records", 20000, "records to produce")
	fs.IntVar(&c.keyCount, "keys", 200, "distinct keys")
	fs.DurationVar(&c.work, "work", 2*time.Millisecond, "the most work the demo's endpoint spends on a record: a uniform draw from 0 to it")
	fs.BoolVar(&c.keep, "keep", false, "keep the record logs and member logs (printed at the end)")
	cli.KafkaFlag(fs, &c.kafka)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if c.work < 0 {
		return cli.Usage(fmt.Errorf("--work %s: want a duration of 0 or more, e.g. 2ms", c.work))
	}
	if err := cli.CheckKafkaFlag(c.kafka); err != nil {
		return err
	}
	if c.members < 2 || c.parts < 1 || c.records < 1 || c.keyCount < 1 || c.duration <= 0 {
		return cli.Usage(errors.New("want --members ≥ 2, --partitions ≥ 1, --records ≥ 1, --keys ≥ 1, --duration > 0"))
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "keyshare-demo-")
	if err != nil {
		return err
	}
	if !c.keep {
		defer os.RemoveAll(dir)
	}

	if c.kafka == "apache" {
		fmt.Printf("starting the bundled cluster: embedded etcd and an Apache Kafka %s broker (a JVM)\n", devcluster.ApacheKafkaVersion)
	} else {
		fmt.Printf("starting the bundled cluster: embedded etcd and an in-process Kafka-protocol broker (kfake)\n")
	}
	cl, err := devcluster.StartCluster(devcluster.ClusterOptions{EtcdAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", DataDir: filepath.Join(dir, "data"), Kafka: c.kafka,
		Topics: map[string]int32{demoTopic: int32(c.parts)}})
	if err != nil {
		return err
	}
	defer cl.Close()
	etcdURL, brokers := cl.Etcd.ClientURL(), cl.Brokers
	fmt.Printf("etcd %s, brokers %s, topic %s with %d partitions\n\n", etcdURL, brokers, demoTopic, c.parts)

	// Every member delivers its records over HTTP to an endpoint the demo
	// runs, which spends the work on each and keeps the record logs the
	// final check reads.
	ep, err := startDemoEndpoint(dir, c.work)
	if err != nil {
		return err
	}
	defer ep.close()
	fmt.Printf("the members deliver each record over HTTP to the demo's endpoint %s (keyshare member --deliver), which spends up to %s on it\n\n", ep.url, c.work)
	view := newLiveView(dir)
	view.note = ep.summary
	procs := make(map[string]*exec.Cmd)
	start := func(id string) error {
		metrics, err := freeAddr()
		if err != nil {
			return err
		}
		args := []string{"member", "--brokers", brokers, "--etcd", etcdURL, "--group", demoGroup, "--topic", demoTopic,
			"--id", id, "--ttl", "2s", "--drain-timeout", "10s", "--log-level", "warn", "--deliver", ep.url, "--metrics-addr", metrics}
		cmd := exec.Command(self, args...)
		logf, err := os.Create(filepath.Join(dir, id+".log"))
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return err
		}
		procs[id] = cmd
		view.event("started member %s (pid %d), metrics at http://%s/metrics", id, cmd.Process.Pid, metrics)
		return nil
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	for i := 1; i <= c.members; i++ {
		if err := start(fmt.Sprintf("m%d", i)); err != nil {
			return err
		}
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": brokers, "group.id": demoGroup, "log_level": 3})
	if err != nil {
		return err
	}
	defer kc.Close()

	prodDone := make(chan error, 1)
	go func() {
		_, err := loadgen.Produce(ctx, brokers, demoTopic, c.records, c.keyCount, 0, float64(c.records)/c.duration.Seconds(), false)
		prodDone <- err
	}()

	began := time.Now()
	killed, added := false, false
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	produced := false
	deadline := began.Add(2*c.duration + 60*time.Second)
	for {
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case err := <-prodDone:
			if err != nil {
				return fmt.Errorf("producer: %w", err)
			}
			produced = true
			view.event("producer finished: %d records", c.records)
		case <-tick.C:
		}
		el := time.Since(began)
		if !killed && el > c.duration*35/100 {
			killed = true
			victim := "m2"
			_ = procs[victim].Process.Signal(syscall.SIGKILL)
			_ = procs[victim].Wait()
			delete(procs, victim)
			view.event("SIGKILL member %s: its ranges fail over when its lease (2s) expires", victim)
		}
		if !added && el > c.duration*55/100 {
			added = true
			if err := start(fmt.Sprintf("m%d", c.members+1)); err != nil {
				return err
			}
		}
		st, err := readStatus(ctx, cli, kc, schema.Group{Prefix: schema.DefaultPrefix, Name: demoGroup})
		if err != nil {
			view.event("status: %v", err)
			continue
		}
		var committed, end int64
		done := produced
		for _, p := range st.Partitions {
			if p.Committed != nil {
				committed += *p.Committed
			}
			if p.End != nil {
				end += *p.End
			}
			if p.Committed == nil || p.End == nil || *p.Committed != *p.End {
				done = false
			}
		}
		view.frame(st, end, committed)
		if done {
			break
		}
		if time.Now().After(deadline) {
			view.event("gave up waiting for the committed offset to reach the end")
			break
		}
	}

	// The table is read while the members still hold their ranges; then
	// they leave gracefully and the record logs are checked.
	final, err := readStatus(ctx, cli, kc, schema.Group{Prefix: schema.DefaultPrefix, Name: demoGroup})
	if err != nil {
		return err
	}
	for id, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
		delete(procs, id)
	}
	st, err := readStatus(ctx, cli, kc, schema.Group{Prefix: schema.DefaultPrefix, Name: demoGroup})
	if err != nil {
		return err
	}
	fmt.Println()
	printStatus(os.Stdout, final)
	v, err := verify(dir, st)
	if err != nil {
		return err
	}
	fmt.Printf("\nverified from the endpoint's record logs:\n")
	fmt.Printf("  produced           %d\n  handled            %d (distinct %d)\n  lost               %d (must be 0)\n  duplicates         %d (allowed after the SIGKILL: records the killed member finished since its last flush)\n  order violations   %d (must be 0)\n  committed == end   %v\n",
		v.produced, v.lines, v.distinct, v.lost, v.lines-v.distinct, v.orderViolations, v.committedAtEnd)
	fmt.Printf("  over HTTP          %s\n", ep.summary())
	if c.keep {
		fmt.Printf("  logs in          %s\n", dir)
	}
	if v.lost > 0 || v.orderViolations > 0 || !v.committedAtEnd {
		return errors.New("a guarantee was broken (see above)")
	}
	fmt.Println("\nall guarantees held.")
	return nil
}

// freeAddr is a loopback address with a port free now, for a member's
// metrics (another process may take it before the member does; the member
// then fails to start, and its log says so).
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func stamp() string { return time.Now().Format("15:04:05") }

// owners summarises who owns how much of the hash space.
func owners(st *groupStatus) string {
	share := make(map[string]float64)
	for _, p := range st.Partitions {
		for _, r := range p.Ranges {
			share[r.Owner] += float64(r.Hi-r.Lo) / float64(uint64(1)<<32)
		}
	}
	var ids []string
	for id := range share {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%s:%.2f ", name(id), share[id])
	}
	return "partitions owned " + b.String()
}

type verdict struct {
	produced, lines, distinct, lost, orderViolations int
	committedAtEnd                                   bool
}

// verify reads every record log and checks the guarantees: every produced
// record (every offset below each partition's end) was handled, and for each
// key the first handling of its records follows their sequence numbers.
func verify(dir string, st *groupStatus) (verdict, error) {
	var v verdict
	type first struct {
		at  time.Time
		seq int
	}
	seen := make(map[string]bool)
	firsts := make(map[string][]first) // per topic/partition/key
	files, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	var all []recordlog.Line
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return v, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var r recordlog.Line
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				fh.Close()
				return v, fmt.Errorf("%s: %w", f, err)
			}
			all = append(all, r)
		}
		fh.Close()
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	for _, r := range all {
		v.lines++
		id := fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset)
		if seen[id] {
			continue
		}
		seen[id] = true
		_, s, _ := strings.Cut(r.Value, ":")
		seq, _ := strconv.Atoi(s)
		k := fmt.Sprintf("%s/%d/%s", r.Topic, r.Partition, r.Key)
		firsts[k] = append(firsts[k], first{r.Time, seq})
	}
	v.distinct = len(seen)
	for _, fs := range firsts {
		for i := 1; i < len(fs); i++ {
			if fs[i].seq < fs[i-1].seq {
				v.orderViolations++
			}
		}
	}
	v.committedAtEnd = len(st.Partitions) > 0
	for _, p := range st.Partitions {
		if p.End == nil {
			v.committedAtEnd = false
			continue
		}
		v.produced += int(*p.End)
		for o := int64(0); o < *p.End; o++ {
			if !seen[fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, o)] {
				v.lost++
			}
		}
		if p.Committed == nil || *p.Committed != *p.End {
			v.committedAtEnd = false
		}
	}
	return v, nil
}
