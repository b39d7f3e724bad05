package nodekit_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// BenchmarkParallelConsumerWorkload runs Parallel Consumer's workload
// through the Node kit (docs/benchmarks.md, section 1b, with the
// endpoint in Node instead of keyshare-bench): 40,000 records over 1,000
// keys on 1 partition, four `keyshare member --deliver` processes of
// --concurrency 25, and one Node endpoint (testdata/bench-endpoint.js,
// concurrency 100) sleeping each record's work, uniform in 0–5 ms. The
// members settle at the log's end before the records are produced; the
// time is the endpoint's, from the first record done to the 40,000th.
// Each iteration starts etcd, the broker, the endpoint and the members
// afresh; run it with -benchtime 1x (README.md has the command). Not in
// `make test`: it takes about 10 s a run on two cores.
func BenchmarkParallelConsumerWorkload(b *testing.B) {
	requireNode(b)
	keyshareBin(b)
	for _, c := range []struct {
		name, mode string
		batch      int // --batch-size; 0: one record per request
		workMs     int
	}{
		{"record-fn/one-per-request", "record", 0, 5},
		{"record-fn/one-per-request/no-work", "record", 0, 0},
		{"record-fn/batch-16", "record", 16, 5},
		{"batch-fn/batch-16", "batch", 16, 5},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				r := runWorkload(b, c.mode, c.batch, c.workMs)
				b.ReportMetric(r.elapsed.Seconds(), "s")
				b.ReportMetric(float64(r.records)/r.elapsed.Seconds(), "records/s")
				if c.workMs > 0 {
					b.ReportMetric(r.elapsed.Seconds()/r.ideal.Seconds(), "x-ideal")
					b.ReportMetric(r.elapsed.Seconds()/r.sleptIdeal.Seconds(), "x-slept-ideal")
				}
				b.ReportMetric(perRecordMicros(r.membersCPU, r.records), "µs-cpu-members/record")
				b.ReportMetric(perRecordMicros(r.endpointCPU, r.records), "µs-cpu-endpoint/record")
			}
		})
	}
}

// workload is what one run measured.
type workload struct {
	records int
	elapsed time.Duration // first record done to the last
	// ideal is Σwork ÷ 100 of the work the workload names; sleptIdeal the
	// same of the sleeps node's timers took.
	ideal, sleptIdeal       time.Duration
	membersCPU, endpointCPU time.Duration
}

func runWorkload(b *testing.B, mode string, batch, workMs int) workload {
	b.Helper()
	const n, keys, members, concurrency = 40000, 1000, 4, 25
	_, e := testutil.StartEtcd(b)
	k := testutil.StartKafka(b, map[string]int32{"pc": 1})
	ep := startNodeEndpoint(b, "bench-endpoint.js", "--expect", strconv.Itoa(n), "--mode", mode,
		"--concurrency", strconv.Itoa(members*concurrency), "--work-ms", strconv.Itoa(workMs))
	var pids []int
	for i := range members {
		args := []string{"--brokers", k.Brokers, "--etcd", e.Endpoints[0], "--group", "pc", "--topic", "pc",
			"--id", fmt.Sprintf("m%d", i), "--deliver", ep.url, "--concurrency", strconv.Itoa(concurrency),
			"--auto-offset-reset", "latest", "--rebalance-debounce", "50ms"}
		if batch > 0 {
			args = append(args, "--batch-size", strconv.Itoa(batch))
		}
		pids = append(pids, startMember(b, args...).Process.Pid)
	}
	testutil.WaitFor(b, "the four members own ranges", time.Minute, func() bool {
		return len(owners(b, e.Endpoints[0], "pc")) == members
	})
	time.Sleep(500 * time.Millisecond) // the members' fetchers reach the log's end
	records := make([]testutil.Record, n)
	var work time.Duration
	for i := range records {
		records[i] = testutil.Record{Key: fmt.Appendf(nil, "key-%d", i%keys), Value: fmt.Appendf(nil, "value-%d", i)}
		work += uniformWork(int64(i), 0, time.Duration(workMs)*time.Millisecond)
	}
	cpu0, epCPU0 := cpuOf(b, pids...), cpuOf(b, ep.cmd.Process.Pid)
	testutil.Produce(b, k.Brokers, "pc", records)
	var line string
	testutil.WaitFor(b, "the endpoint done with every record", 5*time.Minute, func() bool {
		line = doneLine(ep.out.String())
		return line != ""
	})
	r := workload{records: n, ideal: work / (members * concurrency),
		membersCPU: cpuOf(b, pids...) - cpu0, endpointCPU: cpuOf(b, ep.cmd.Process.Pid) - epCPU0}
	var elapsedMs, sleptMs float64
	if _, err := fmt.Sscanf(line, "done %d %f %f", new(int), &elapsedMs, &sleptMs); err != nil {
		b.Fatalf("the endpoint's line %q: %v", line, err)
	}
	r.elapsed = time.Duration(elapsedMs * float64(time.Millisecond))
	r.sleptIdeal = time.Duration(sleptMs*float64(time.Millisecond)) / (members * concurrency)
	return r
}

// doneLine is the endpoint's "done ..." line, once it printed it.
func doneLine(out string) string {
	for line := range strings.Lines(out) {
		if strings.HasPrefix(line, "done ") {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// uniformWork is keyshare-bench's work of a record (testdata/bench-endpoint.js
// draws the same): a mix of its offset and partition, uniform in [0, limit].
func uniformWork(offset int64, partition int32, limit time.Duration) time.Duration {
	x := uint64(offset)*0x9E3779B97F4A7C15 + uint64(partition)
	x ^= x >> 31
	x *= 0xBF58476D1CE4E5B9
	x ^= x >> 29
	return time.Duration(x % uint64(limit+1))
}

// cpuOf is the CPU time (user and system) the processes have used, from
// /proc/PID/stat; 0 where there is no /proc.
func cpuOf(b *testing.B, pids ...int) time.Duration {
	b.Helper()
	var sum time.Duration
	for _, pid := range pids {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return 0
		}
		// The fields after the command's closing parenthesis: utime and
		// stime are the 12th and 13th, in clock ticks of 10 ms.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		for _, f := range fields[11:13] {
			ticks, _ := strconv.ParseInt(f, 10, 64)
			sum += time.Duration(ticks) * 10 * time.Millisecond
		}
	}
	return sum
}

func perRecordMicros(d time.Duration, n int) float64 {
	return float64(d.Microseconds()) / float64(n)
}
