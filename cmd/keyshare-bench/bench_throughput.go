package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/keyshare/keyshare/cmd/internal/loadgen"
)

// throughputTopic is the throughput scenario's topic: one partition.
const throughputTopic = "throughput"

// throughput4Topic holds the same records over four partitions: the scale
// a group reaches without sharing a partition.
const throughput4Topic = "throughput-4"

// tunedPrefetch is the bare client's prefetch of the measurement:
// librdkafka keeps up to a million records queued per partition instead of
// 100,000.
var tunedPrefetch = []string{"queued.min.messages=1000000"}

// throughputRow is one reader setup of the throughput scenario: records/s,
// CPU (and its share on librdkafka's threads, -1 if not measured) and Go
// allocations per record of the topic.
type throughputRow struct {
	rate, cpuMicros, rdkMicros, allocs, allocBytes float64
	note                                           string
}

// throughputSetup is one row of a throughput table: a name and the run that
// measures it once.
type throughputSetup struct {
	name string
	run  func() (throughputRow, error)
}

// throughput reads the same N records of one partition, then of four, with
// kcat, a bare confluent-kafka-go poll loop and keyshare members, each in
// processes of their own, and reports records/s and CPU per record.
func (c *benchCommand) throughput(ctx context.Context) error {
	n := c.records
	if n == 0 {
		n = 1_000_000
		if c.quick {
			n = 100_000
		}
	}
	for _, topic := range []string{throughputTopic, throughput4Topic} {
		if _, err := loadgen.Produce(ctx, c.brokers, topic, n, 10000, 0, 0, false); err != nil {
			return err
		}
	}
	c.printf("## 0. Throughput of one partition\n\n%s records of about 20 bytes over 10,000 keys in one partition, produced in advance, read from the start with no work per record; every reader runs in a process of its own. CPU is the readers' processes' user+system time (all threads, librdkafka's included) from the first record to the last, divided by the records of the topic; allocations are the Go heap's over the same window (none for kcat; its figures include its start). keyshare members run with DefaultConfig (16 workers, MaxInFlight 1,000) and librdkafka settings as keyshare sets them (defaults), or with the bare loop's deep prefetch added (tuned). Each figure is the median of %d runs.\n\n", withCommas(int64(n)), c.runs)
	tuned := strings.Join(tunedPrefetch, ",")
	one := []throughputSetup{
		{"kcat -C -e (librdkafka defaults)", func() (throughputRow, error) { return c.readKcat(n) }},
		{"bare confluent-kafka-go Poll loop, librdkafka defaults", c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "bare", count: 1})},
		{"bare Poll loop, " + tuned, c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "bare", count: 1, props: tunedPrefetch})},
		{"one keyshare member, defaults", c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "keyshare", count: 1, profileDir: c.memberProfile})},
		{"one keyshare member, tuned (" + tuned + ")", c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "keyshare", count: 1, props: tunedPrefetch})},
		{"four keyshare members on the partition, defaults (group)", c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "keyshare", count: 4, profileDir: c.memberProfile})},
		{"four keyshare members on the partition, tuned (group)", c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "keyshare", count: 4, props: tunedPrefetch})},
	}
	for _, t := range c.tries {
		props := strings.Split(t, ",")
		one = append(one,
			throughputSetup{"bare Poll loop, " + t, c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "bare", count: 1, props: props})},
			throughputSetup{"one keyshare member, " + t, c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "keyshare", count: 1, props: props})})
	}
	for _, exe := range c.compare {
		one = append(one,
			throughputSetup{"one keyshare member, defaults, of " + exe, c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "keyshare", count: 1, exe: exe})},
			throughputSetup{"four keyshare members on the partition, defaults (group), of " + exe, c.reader(n, readers{topic: throughputTopic, partitions: 1, mode: "keyshare", count: 4, exe: exe})})
	}
	if err := c.throughputTable(one, 2); err != nil {
		return err
	}
	c.printf("\nFour members each fetch the whole partition and pass over the records of the others' ranges, so their CPU per record of the topic counts every record fetched four times.\n\n")

	c.printf("### Four partitions\n\nThe same %s records over four partitions (the producer's partitioner spreads the keys), read by a bare loop assigned all four, one member and four members of a group: with four members on four partitions each member owns a whole partition and passes over nothing.\n\n", withCommas(int64(n)))
	four := []throughputSetup{
		{"bare Poll loop on 4 partitions, librdkafka defaults", c.reader(n, readers{topic: throughput4Topic, partitions: 4, mode: "bare", count: 1})},
		{"bare Poll loop on 4 partitions, " + tuned, c.reader(n, readers{topic: throughput4Topic, partitions: 4, mode: "bare", count: 1, props: tunedPrefetch})},
		{"one keyshare member on 4 partitions, defaults", c.reader(n, readers{topic: throughput4Topic, partitions: 4, mode: "keyshare", count: 1})},
		{"one keyshare member on 4 partitions, tuned", c.reader(n, readers{topic: throughput4Topic, partitions: 4, mode: "keyshare", count: 1, props: tunedPrefetch})},
		{"four keyshare members on 4 partitions, defaults (group)", c.reader(n, readers{topic: throughput4Topic, partitions: 4, mode: "keyshare", count: 4})},
		{"four keyshare members on 4 partitions, tuned (group)", c.reader(n, readers{topic: throughput4Topic, partitions: 4, mode: "keyshare", count: 4, props: tunedPrefetch})},
	}
	for _, exe := range c.compare {
		four = append(four, throughputSetup{"one keyshare member on 4 partitions, defaults, of " + exe, c.reader(n, readers{topic: throughput4Topic, partitions: 4, mode: "keyshare", count: 1, exe: exe})})
	}
	if err := c.throughputTable(four, 1); err != nil {
		return err
	}
	c.printf("\n")
	return c.latency(ctx) // bench_latency.go
}

// readers are the reader processes of one throughput row.
type readers struct {
	topic      string
	partitions int      // a bare loop is assigned the topic's first partitions
	mode       string   // bare or keyshare
	count      int      // processes, of one group
	props      []string // librdkafka settings added to theirs
	profileDir string   // if set, the first writes its CPU and allocation profiles here
	// exe is the keyshare-bench binary they run: this one, or another
	// (--compare), such as one built from an older tree.
	exe string
}

// reader is the run of r over n records.
func (c *benchCommand) reader(n int, r readers) func() (throughputRow, error) {
	return func() (throughputRow, error) { return c.readChildren(n, r) }
}

// throughputTable runs setups in turns, c.runs times, and prints each
// setup's median run (by records/s); the "× bare" column is against
// setups[ref], a bare loop with deep prefetch.
func (c *benchCommand) throughputTable(setups []throughputSetup, ref int) error {
	c.printf("| reader | records/s | × bare, tuned prefetch | CPU µs/record | of which librdkafka's threads | allocs/record | B/record |\n|---|---|---|---|---|---|---|\n")
	// Runs take turns, setup after setup, so that a burst of load on a
	// shared machine does not fall on one setup's runs only.
	runs := make([][]throughputRow, len(setups))
	for range c.runs {
		for i, s := range setups {
			if len(runs[i]) > 0 && runs[i][0].note != "" {
				continue
			}
			r, err := s.run()
			if err != nil {
				return fmt.Errorf("throughput, %s: %w", s.name, err)
			}
			runs[i] = append(runs[i], r)
		}
	}
	rows := make([]throughputRow, len(setups))
	for i, rs := range runs {
		sort.Slice(rs, func(i, j int) bool { return rs[i].rate < rs[j].rate })
		rows[i] = rs[len(rs)/2]
	}
	bare := rows[ref].rate
	for i, r := range rows {
		if r.note != "" {
			c.printf("| %s | %s | | | | | |\n", setups[i].name, r.note)
			continue
		}
		rdk, allocs, bytes := "—", "—", "—"
		if r.rdkMicros >= 0 {
			rdk = fmt.Sprintf("%.2f", r.rdkMicros)
		}
		if r.allocs >= 0 {
			allocs, bytes = fmt.Sprintf("%.1f", r.allocs), withCommas(int64(r.allocBytes))
		}
		c.printf("| %s | %s | %.2f | %.2f | %s | %s | %s |\n", setups[i].name, withCommas(int64(r.rate)), r.rate/bare, r.cpuMicros, rdk, allocs, bytes)
	}
	return nil
}

// readKcat times `kcat -C -e` over the partition, from its start to its exit.
func (c *benchCommand) readKcat(n int) (throughputRow, error) {
	path, err := exec.LookPath("kcat")
	if err != nil {
		return throughputRow{note: "kcat is not installed (Debian package kcat)"}, nil
	}
	cmd := exec.Command(path, "-C", "-b", c.brokers, "-t", throughputTopic, "-p", "0", "-o", "beginning", "-e", "-q")
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return throughputRow{}, err
	}
	d := time.Since(t0)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := ru.Utime.Nano() + ru.Stime.Nano()
	return throughputRow{rate: float64(n) / d.Seconds(), cpuMicros: float64(cpu) / 1e3 / float64(n), rdkMicros: -1, allocs: -1}, nil
}

// readerChild is a running throughput-reader process and its latest report.
type readerChild struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	ready  chan struct{}
	latest chan readerReport // holds the latest report
	done   chan error
}

// spawnReader starts a reader process of exe (this binary if empty).
func (c *benchCommand) spawnReader(exe string, args ...string) (*readerChild, error) {
	if exe == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		exe = self
	}
	cmd := exec.Command(exe, append([]string{readerCommand}, args...)...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := &readerChild{cmd: cmd, stdin: stdin, ready: make(chan struct{}), latest: make(chan readerReport, 1), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r := readerReport{RdkCPUNanos: -1} // as read from a binary that does not report it
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue
			}
			if r.Ready {
				close(ch.ready)
				continue
			}
			select {
			case <-ch.latest:
			default:
			}
			ch.latest <- r
		}
		ch.done <- cmd.Wait()
	}()
	return ch, nil
}

// readChildren runs the reader processes of r (a fresh group), starts
// them together once all are set up, and stops them once they have
// handled n records between them.
func (c *benchCommand) readChildren(n int, r readers) (throughputRow, error) {
	group := fmt.Sprintf("throughput-%d", c.groups.Add(1))
	var children readerChildren
	defer func() { children.kill() }()
	for i := range r.count {
		args, err := c.readerArgs(r, group, i)
		if err != nil {
			return throughputRow{}, err
		}
		ch, err := c.spawnReader(r.exe, args...)
		if err != nil {
			return throughputRow{}, err
		}
		children = append(children, ch)
	}
	if err := children.startTogether(); err != nil {
		return throughputRow{}, err
	}
	reports, err := children.waitHandled(n)
	if err != nil {
		return throughputRow{}, err
	}
	totals, err := children.stop(reports)
	if err != nil {
		return throughputRow{}, err
	}
	children = nil // all exited
	return totals.row(n), nil
}

// readerArgs is the command line of reader i of r in group.
func (c *benchCommand) readerArgs(r readers, group string, i int) ([]string, error) {
	args := []string{"--mode", r.mode, "--brokers", c.brokers, "--etcd", c.etcd, "--topic", r.topic, "--partitions", strconv.Itoa(r.partitions), "--group", group, "--id", fmt.Sprintf("t%d", i)}
	for _, p := range r.props {
		args = append(args, "-X", p)
	}
	if r.profileDir != "" && i == 0 {
		if err := os.MkdirAll(r.profileDir, 0o755); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%s-%d", r.mode, r.count) // keyshare-1: the one member; keyshare-4: the first of four
		args = append(args, "--cpuprofile", filepath.Join(r.profileDir, name+".cpu.pprof"), "--allocprofile", filepath.Join(r.profileDir, name+".allocs.pprof"))
	}
	return args, nil
}

// withCommas writes n with a comma between each group of three digits.
func withCommas(n int64) string {
	s := strconv.FormatInt(n, 10)
	start := 0
	if n < 0 {
		start = 1
	}
	for i := len(s) - 3; i > start; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
