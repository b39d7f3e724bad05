package kit_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// BenchmarkPCWorkload is Parallel Consumer's workload through the Python
// kit (docs/benchmarks.md, section 1b): 40,000 records over 1,000 keys on
// 1 partition, four `keyshare member --deliver` processes of
// --concurrency 25 (100 requests open at once) to one Python endpoint
// (testdata/bench_endpoint.py, the kit's @endpoint with concurrency 100)
// that sleeps each record's work, uniform in 0–5 ms, a request's records
// one after the other. Time runs from the first record the endpoint
// finished to the 40,000th; ideal is Σwork ÷ 100. Not in CI: run it with
//
//	go test -run '^$' -bench BenchmarkPCWorkload -benchtime 1x ./kits/python/
func BenchmarkPCWorkload(b *testing.B) {
	for _, bc := range []struct {
		name  string
		batch int
		work  bool
	}{
		{"one-per-request", 0, true},
		{"one-per-request-no-work", 0, false},
		{"batch-4", 4, true},
		{"batch-16", 16, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				runPCWorkload(b, bc.batch, bc.work)
			}
		})
	}
}

const (
	benchRecords = 40000
	benchKeys    = 1000
	benchWarmup  = 400 // records the members deliver first, so that all four own a range
)

func runPCWorkload(b *testing.B, batch int, work bool) {
	bin := keyshareBin(b)
	_, e := testutil.StartEtcd(b)
	k := testutil.StartKafka(b, map[string]int32{topic: 1})
	dir := b.TempDir()
	result := filepath.Join(dir, "result.json")
	args := []string{filepath.Join(kitDir, "testdata", "bench_endpoint.py"), "--records", strconv.Itoa(benchRecords),
		"--warmup", strconv.Itoa(benchWarmup), "--result", result}
	if !work {
		args = append(args, "--no-work")
	}
	// Standard library only: the machine's python3 runs the checkout's kit.
	b.Setenv("PYTHONPATH", filepath.Join(kitDir, "src"))
	ep := startPy(b, "python3", args...)
	records := make([]testutil.Record, benchWarmup+benchRecords)
	for i := range records {
		records[i] = testutil.Record{Key: fmt.Appendf(nil, "key-%d", i%benchKeys), Value: fmt.Appendf(nil, "value-%d", i)}
	}
	for i := range 4 {
		a := []string{"member", "--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", group, "--topic", topic,
			"--id", fmt.Sprintf("h%d", i), "--deliver", "http://" + ep.addr + "/", "--concurrency", "25",
			"--rebalance-debounce", "50ms", "--log-level", "warn"}
		if batch > 0 {
			a = append(a, "--batch-size", strconv.Itoa(batch))
		}
		cmd := exec.Command(bin, a...)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() })
	}
	time.Sleep(3 * time.Second) // the four members join and split the partition
	testutil.Produce(b, k.Brokers, topic, records[:benchWarmup])
	testutil.WaitFor(b, "the warm-up records committed", 60*time.Second, func() bool {
		c, err := testutil.ReadCommitted(k.Brokers, group, topic, 1)
		return err == nil && c[0] == benchWarmup
	})
	cpu0 := cpuOf(b, ep.cmd.Process.Pid)
	b.ResetTimer()
	testutil.Produce(b, k.Brokers, topic, records[benchWarmup:])
	testutil.WaitFor(b, "every record done at the endpoint", 5*time.Minute, func() bool {
		_, err := os.Stat(result)
		return err == nil
	})
	b.StopTimer()
	cpu := cpuOf(b, ep.cmd.Process.Pid) - cpu0
	raw, err := os.ReadFile(result)
	if err != nil {
		b.Fatal(err)
	}
	var got struct{ First, Last float64 }
	if err := json.Unmarshal(raw, &got); err != nil {
		b.Fatal(err)
	}
	elapsed := got.Last - got.First
	ideal := 0.0
	if work {
		ideal = sumWork(benchWarmup, benchWarmup+benchRecords).Seconds() / 100
	}
	b.ReportMetric(float64(benchRecords)/elapsed, "records/s")
	b.ReportMetric(elapsed, "s")
	if ideal > 0 {
		b.ReportMetric(elapsed/ideal, "×ideal")
	}
	b.ReportMetric(float64(cpu.Microseconds())/benchRecords, "endpoint-µs-cpu/record")
}

// sumWork is Σwork of offsets [from, to) of partition 0, drawn as
// testdata/bench_endpoint.py (and keyshare-bench) draw it.
func sumWork(from, to int) time.Duration {
	var sum time.Duration
	for o := from; o < to; o++ {
		x := uint64(o) * 0x9E3779B97F4A7C15
		x ^= x >> 31
		x *= 0xBF58476D1CE4E5B9
		x ^= x >> 29
		sum += time.Duration(x % uint64(5*time.Millisecond+1))
	}
	return sum
}

// cpuOf is the user and system CPU time process pid has used (Linux).
func cpuOf(b *testing.B, pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the line, in clock ticks (100 a second).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// BenchmarkPostgresSink times the kit's PostgreSQL part from one thread
// (testdata/pg_bench.py): µs a record through PostgresSink.apply (a
// transaction each) and apply_batch (100 a transaction), each effect one
// INSERT, into testutil.StartPostgres's server over loopback. Run it with
//
//	go test -run '^$' -bench BenchmarkPostgresSink -benchtime 1x ./kits/python/
func BenchmarkPostgresSink(b *testing.B) {
	python := kitPython(b)
	for range b.N {
		pg := testutil.StartPostgres(b)
		out, err := exec.Command(python, filepath.Join(kitDir, "testdata", "pg_bench.py"), "--postgres", pg.URL).Output()
		if err != nil {
			b.Fatalf("pg_bench.py: %v\n%s", err, out)
		}
		var got struct {
			ApplyUs float64 `json:"apply_us"`
			BatchUs float64 `json:"batch_us"`
		}
		if err := json.Unmarshal(out, &got); err != nil {
			b.Fatalf("pg_bench.py printed %q: %v", out, err)
		}
		b.ReportMetric(got.ApplyUs, "µs/record-apply")
		b.ReportMetric(got.BatchUs, "µs/record-batch100")
	}
}
