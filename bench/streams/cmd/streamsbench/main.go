// Command streamsbench runs a per-key count with a slow lookup per record in
// Kafka Streams and in keyshare with package statestore, on the same records
// of one Apache Kafka broker, and prints a Markdown table of their rates and
// whether each one's final counts are exact (make bench-streams).
//
// The workload: --records records over --keys keys, produced once into a
// topic of 1 partition and once into one of 4; each record's handling waits
// --lookup (5 ms) and then adds one to its key's count. Kafka Streams
// (bench/streams, CountApp: groupByKey().count() under exactly_once_v2) runs
// as one JVM with one stream thread per partition, the most it can use;
// keyshare runs members with a statestore.Store each, in this process, at
// the same parallelism as Streams and at its default of 16 records at once.
// The rate of a row is its records over the time from the first lookup's
// start to the last record's end. A row's counts are exact when every key's
// final count, read back from Kafka (Streams' output topic, read committed;
// the statestore changelog, read as a restore reads it), equals its number
// of records. Each row is run --runs times; the table shows the median
// run by records/s, with the range.
//
// --crash F kills the Streams application (SIGKILL) once F of the counts
// are out and starts it again. With --streams-guarantee at_least_once and
// no record cache (--streams-cache-bytes 0), the counts the killed
// instance wrote to its store's changelog after its last commit are
// counted again, and its row's counts are wrong: the run that shows the
// check can fail. (With the cache, a count reaches the changelog only at
// a commit, with its input offsets, and a kill between two commits loses
// both alike.)
//
//	streamsbench [--records 10000] [--keys 1000] [--partitions 1,4] [--lookup 5ms] [--runs 3] [-v]
//	streamsbench --only streams --crash 0.5 --streams-guarantee at_least_once --streams-cache-bytes 0 --records 4000 --partitions 1
//	streamsbench --brokers HOST:PORT ...   # a running Kafka 4.x broker instead of a new one
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/keyshare/keyshare/internal/devcluster"
)

// bench is one run of the comparison.
type bench struct {
	records    int
	runs       int
	keys       int
	partitions []int32
	lookup     time.Duration
	appDir     string // the built Maven project of CountApp
	brokers    string
	etcd       string
	dir        string
	verbose    bool
	stall      time.Duration
	only       string            // streams, keyshare, or "" for both
	crashAt    float64           // kill the Streams application once this share of the counts is out
	guarantee  string            // the Streams application's processing.guarantee
	cacheBytes int64             // the Streams application's statestore.cache.max.bytes; -1 for its default
	storeKafka map[string]string // librdkafka settings for the Stores' changelog producers only
}

func main() {
	var b bench
	var parts, storeKafka string
	flag.IntVar(&b.records, "records", 10000, "records per topic")
	flag.IntVar(&b.runs, "runs", 3, "runs of each row; the table shows the median run (by records/s) and the range")
	flag.IntVar(&b.keys, "keys", 1000, "distinct keys, the records spread over them in turn")
	flag.StringVar(&parts, "partitions", "1,4", "partition counts of the input topics, comma-separated")
	flag.DurationVar(&b.lookup, "lookup", 5*time.Millisecond, "the simulated lookup of each record")
	flag.StringVar(&b.appDir, "app-dir", "bench/streams", "the built Maven project of the Kafka Streams application")
	flag.StringVar(&b.brokers, "brokers", "", "use this running Kafka 4.x broker instead of starting one")
	flag.DurationVar(&b.stall, "stall", 60*time.Second, "give a row up when its counts have not moved for this long")
	flag.StringVar(&b.only, "only", "", `run only the rows of "streams" or of "keyshare"`)
	flag.Float64Var(&b.crashAt, "crash", 0, "kill the Streams application once this share (0 to 1) of the counts is out, and start it again")
	flag.StringVar(&b.guarantee, "streams-guarantee", "exactly_once_v2", "the Streams application's processing.guarantee: exactly_once_v2 or at_least_once")
	flag.Int64Var(&b.cacheBytes, "streams-cache-bytes", -1, "the Streams application's statestore.cache.max.bytes (-1: its default, 10 MiB)")
	flag.StringVar(&storeKafka, "store-kafka", "", "librdkafka settings for the Stores' changelog producers only, e.g. linger.ms=0 (comma-separated)")
	flag.BoolVar(&b.verbose, "v", false, "print progress to stderr")
	flag.Parse()
	if err := b.parseFlags(parts, storeKafka); err != nil {
		fmt.Fprintln(os.Stderr, "streamsbench:", err)
		os.Exit(2)
	}
	if err := b.run(); err != nil {
		fmt.Fprintln(os.Stderr, "streamsbench:", err)
		os.Exit(1)
	}
}

func (b *bench) parseFlags(parts, storeKafka string) error {
	switch {
	case b.records <= 0:
		return fmt.Errorf("--records %d: give a positive number", b.records)
	case b.runs <= 0:
		return fmt.Errorf("--runs %d: give a positive number", b.runs)
	case b.keys <= 0 || b.keys > b.records:
		return fmt.Errorf("--keys %d: give a number from 1 to --records (%d)", b.keys, b.records)
	case b.lookup < 0:
		return fmt.Errorf("--lookup %s is negative", b.lookup)
	case b.only != "" && b.only != "streams" && b.only != "keyshare":
		return fmt.Errorf(`--only %q: want "streams" or "keyshare"`, b.only)
	case b.crashAt < 0 || b.crashAt >= 1:
		return fmt.Errorf("--crash %g: give the share of the counts (above 0, below 1) at which to kill the Streams application, or 0 for none", b.crashAt)
	case b.guarantee != "exactly_once_v2" && b.guarantee != "at_least_once":
		return fmt.Errorf("--streams-guarantee %q: want exactly_once_v2 or at_least_once", b.guarantee)
	}
	for _, f := range strings.Split(parts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return fmt.Errorf("--partitions %q: want positive partition counts separated by commas, e.g. 1,4", parts)
		}
		b.partitions = append(b.partitions, int32(n))
	}
	b.storeKafka = map[string]string{}
	for _, kv := range strings.Split(storeKafka, ",") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("--store-kafka %q: want name=value pairs separated by commas, e.g. linger.ms=0", storeKafka)
		}
		b.storeKafka[k] = v
	}
	jar := filepath.Join(b.appDir, "target", "streams-count.jar")
	if _, err := os.Stat(jar); err != nil {
		return fmt.Errorf("%s: build the Kafka Streams application first (cd %s && mvn -q package; make bench-streams does)", jar, b.appDir)
	}
	return nil
}

func (b *bench) logf(format string, a ...any) {
	if b.verbose {
		fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
}

func (b *bench) run() error {
	var err error
	if b.dir, err = os.MkdirTemp("", "bench-streams-"); err != nil {
		return err
	}
	defer os.RemoveAll(b.dir)
	e, err := devcluster.StartEtcd(devcluster.EtcdOptions{Dir: filepath.Join(b.dir, "etcd")})
	if err != nil {
		return err
	}
	defer e.Close()
	b.etcd = e.ClientURL()
	if b.brokers == "" {
		b.logf("starting Apache Kafka %s", devcluster.ApacheKafkaVersion)
		k, err := devcluster.StartApacheKafka(devcluster.ApacheKafkaOptions{Dir: filepath.Join(b.dir, "kafka")})
		if err != nil {
			return err
		}
		defer k.Close()
		b.brokers = k.Brokers()
	}
	t0, load0 := time.Now(), loadavg()
	var rows []row
	for _, p := range b.partitions {
		in, err := b.produce(p)
		if err != nil {
			return err
		}
		for _, s := range b.setups(p) {
			var runs []row
			for i := range b.runs {
				b.logf("%s on %s, run %d of %d", s, plural(int(p), "partition"), i+1, b.runs)
				r, err := b.runSetup(in, s)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", s, plural(int(p), "partition"), err)
				}
				b.logf("  %.0f records/s, counts: %s", r.rate(), r.counts)
				runs = append(runs, r)
			}
			rows = append(rows, summarize(runs))
		}
	}
	fmt.Print(b.report(rows, t0, load0))
	return nil
}

func (b *bench) runSetup(in *input, s setup) (row, error) {
	if s.system == streams {
		return b.runStreams(in, s)
	}
	return b.runKeyshare(in, s)
}

func loadavg() string {
	s, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(s))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
