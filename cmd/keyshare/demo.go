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
	"time"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/loadgen"
	"github.com/keyshare/keyshare/cmd/internal/recordlog"
	"github.com/keyshare/keyshare/internal/devcluster"
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
	if err := c.parse(args); err != nil {
		return err
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
	cl, err := c.startCluster(dir)
	if err != nil {
		return err
	}
	defer cl.Close()

	// Every member delivers its records over HTTP to an endpoint the demo
	// runs, which spends the work on each and keeps the record logs the
	// final check reads.
	ep, err := startDemoEndpoint(dir, c.work)
	if err != nil {
		return err
	}
	defer ep.close()
	fmt.Printf("the members deliver each record over HTTP to the demo's endpoint %s (keyshare member --deliver), which spends up to %s on it\n\n", ep.url, c.work)
	r := &demoRun{c: c, self: self, dir: dir, etcdURL: cl.Etcd.ClientURL(), brokers: cl.Brokers,
		ep: ep, view: newLiveView(dir), procs: make(map[string]*exec.Cmd)}
	r.view.note = ep.summary
	defer r.killMembers()
	for i := 1; i <= c.members; i++ {
		if err := r.startMember(fmt.Sprintf("m%d", i)); err != nil {
			return err
		}
	}
	if err := r.connect(); err != nil {
		return err
	}
	defer r.etcd.Close()
	defer r.kc.Close()

	prodDone := make(chan error, 1)
	go func() {
		_, err := loadgen.Produce(ctx, r.brokers, demoTopic, c.records, c.keyCount, 0, float64(c.records)/c.duration.Seconds(), false)
		prodDone <- err
	}()
	if err := r.watch(ctx, prodDone); err != nil {
		return err
	}
	return r.finish(ctx)
}

// parse reads the demo's flags and checks their values.
func (c *demoCommand) parse(args []string) error {
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
	return nil
}

// startCluster starts the bundled etcd and broker, with the demo topic.
func (c *demoCommand) startCluster(dir string) (*devcluster.Cluster, error) {
	if c.kafka == "apache" {
		fmt.Printf("starting the bundled cluster: embedded etcd and an Apache Kafka %s broker (a JVM)\n", devcluster.ApacheKafkaVersion)
	} else {
		fmt.Printf("starting the bundled cluster: embedded etcd and an in-process Kafka-protocol broker (kfake)\n")
	}
	cl, err := devcluster.StartCluster(devcluster.ClusterOptions{EtcdAddr: "127.0.0.1:0", KafkaAddr: "127.0.0.1:0", DataDir: filepath.Join(dir, "data"), Kafka: c.kafka,
		Topics: map[string]int32{demoTopic: int32(c.parts)}})
	if err != nil {
		return nil, err
	}
	fmt.Printf("etcd %s, brokers %s, topic %s with %d partitions\n\n", cl.Etcd.ClientURL(), cl.Brokers, demoTopic, c.parts)
	return cl, nil
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
