package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

// deliverTopic is the topic of the pc-http scenario (1 partition).
const deliverTopic = "pc-http"

// sleepingEndpoint is an HTTP delivery endpoint (docs/delivery.md) that
// spends work(record) on each record of a request, one after the other,
// then answers 200. It counts each record once, from the first record it
// finished to the last.
type sleepingEndpoint struct {
	work func(*kafka.Message) time.Duration
	srv  *http.Server
	url  string

	mu   sync.Mutex
	done map[int64]bool // offsets finished
	sum  time.Duration  // their work
	span span
}

func startSleepingEndpoint(work func(*kafka.Message) time.Duration) (*sleepingEndpoint, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &sleepingEndpoint{work: work, url: "http://" + ln.Addr().String() + "/", done: map[int64]bool{}}
	e.srv = &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *sleepingEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Records []struct {
			Partition int32 `json:"partition"`
			Offset    int64 `json:"offset"`
		} `json:"records"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rec := range body.Records {
		d := e.work(&kafka.Message{TopicPartition: kafka.TopicPartition{Partition: rec.Partition, Offset: kafka.Offset(rec.Offset)}})
		if err := worksleep.Sleep(r.Context(), d); err != nil {
			return // the member closed the request: it sends the record again
		}
		e.mu.Lock()
		first := !e.done[rec.Offset]
		if first {
			e.done[rec.Offset] = true
			e.sum += d
		}
		e.mu.Unlock()
		if first {
			e.span.hit()
		}
	}
}

func (e *sleepingEndpoint) close() { _ = e.srv.Close() }

// cpuUse is CPU time used by the members and by this process, and the
// context switches of the whole machine meanwhile.
type cpuUse struct {
	members, bench time.Duration
	switches       int64
}

// contextSwitches is the machine's count of context switches since it
// booted (/proc/stat's ctxt), or -1 where there is none.
func contextSwitches() int64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "ctxt "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// selfCPU is the CPU time (user and system) this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// parallelConsumerOverHTTP is Parallel Consumer's workload (1 partition,
// work uniform in 0–5 ms, total concurrency 100) with the work done by an
// HTTP endpoint: four `keyshare-bench member --deliver` processes of 25
// concurrent requests each.
func (c *benchCommand) parallelConsumerOverHTTP(ctx context.Context) error {
	n := 40000
	if c.quick {
		n = 10000
	}
	const members, concurrency, keyCount = 4, 25, 1000
	work := uniformWork(5 * time.Millisecond)
	c.printf("## 1b. Parallel Consumer's workload through HTTP\n\n%d records over %d keys (uniform) in 1 partition; %d `keyshare-bench member --deliver` processes × `--concurrency %d`, one record per request (in the last two rows, batches of up to 4 and 16); the endpoint (an HTTP server in keyshare-bench) sleeps each record's work, uniform in 0–5 ms, before it answers. The members join a fresh group at the log's end, and the records are produced once they have settled; time is from the first record the endpoint finished to the last. Ideal = Σwork ÷ 100 (100 requests open at once), unless producing the records took longer (then the producer's time is the bound). The zero-work row is the first with no sleep: the ceiling of members, HTTP and this machine. CPU per record: the CPU time (user and system, mean over the runs) the four members, and keyshare-bench (the endpoint, the broker, etcd and the producer), used from the first record produced to the last finished; switches per record: the machine's context switches over the same time.\n\n", n, keyCount, members, concurrency)
	c.printf("| work | time | records/s | producer's time | ideal | × ideal | CPU per record, members | CPU per record, keyshare-bench | context switches per record |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range []struct {
		name  string
		work  func(*kafka.Message) time.Duration
		batch int // records per request; 0: one, without --batch-size
	}{
		{"0–5 ms", work, 0},
		{"none", func(*kafka.Message) time.Duration { return 0 }, 0},
		{"0–5 ms, `--batch-size 4`", work, 4},
		{"0–5 ms, `--batch-size 16`", work, 16},
	} {
		var produce, ideal []time.Duration
		var cpu cpuUse
		s, err := c.repeat(func() (time.Duration, error) {
			d, p, sum, err := c.runDeliver(ctx, n, members, concurrency, keyCount, w.work, w.batch, &cpu)
			produce, ideal = append(produce, p), append(ideal, max(sum/(members*concurrency), p))
			return d, err
		})
		if err != nil {
			return err
		}
		p, i := summarize(produce), summarize(ideal)
		perRecord := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n*c.runs) }
		c.printf("| %s | %s | %.0f | %s | %.2f s | %.2f | %.0f µs | %.0f µs | %.1f |\n", w.name, s, float64(n)/s.med.Seconds(), p, i.med.Seconds(), s.med.Seconds()/i.med.Seconds(),
			perRecord(cpu.members), perRecord(cpu.bench), float64(cpu.switches)/float64(n*c.runs))
	}
	c.printf("\nGoal: within 1.5× of ideal. With `--batch-size` a request carries up to that many records of any keys (a key's in offset order), and the endpoint works them one after the other: still 100 records worked at once, so the ideal is the same; each record waits for those before it in its request.\n\n")
	return nil
}

// runDeliver runs members `keyshare-bench member --deliver` processes of a
// fresh group (with --batch-size batch unless 0) against a fresh
// sleepingEndpoint, produces n records once they settled, and returns the
// endpoint's time from the first record finished to the n-th, how long
// producing took, and the records' Σwork; it adds the CPU time the
// members and this process used meanwhile to cpu.
func (c *benchCommand) runDeliver(ctx context.Context, n, members, concurrency, keyCount int, work func(*kafka.Message) time.Duration, batch int, cpu *cpuUse) (elapsed, produced, sum time.Duration, err error) {
	ep, err := startSleepingEndpoint(work)
	if err != nil {
		return 0, 0, 0, err
	}
	defer ep.close()
	group := fmt.Sprintf("bench-http-%d", c.groups.Add(1))
	var ms []*benchMember
	defer func() {
		for _, m := range ms {
			m.stop(syscall.SIGKILL)
		}
	}()
	var ids []string
	for i := range members {
		id := fmt.Sprintf("h%d", i)
		args := []string{"--deliver", ep.url, "--concurrency", fmt.Sprint(concurrency), "--auto-offset-reset", "latest", "--rebalance-debounce", "50ms"}
		if batch > 0 {
			args = append(args, "--batch-size", fmt.Sprint(batch))
		}
		m, err := c.spawnMember(deliverTopic, group, id, args...)
		if err != nil {
			return 0, 0, 0, err
		}
		ms, ids = append(ms, m), append(ids, id)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0, 0, err
	}
	defer cli.Close()
	g := groupOf(schema.Group{Prefix: "", Name: group}.Keys())
	if _, err := waitUntil(ctx, time.Minute, 50*time.Millisecond, func() bool {
		snap, err := coord.ReadSnapshot(ctx, cli, g)
		if err != nil || !settledFor(snap, map[string]int32{deliverTopic: 1}, "") {
			return false
		}
		for _, id := range ids {
			if len(snap.Owned(id)) == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return 0, 0, 0, fmt.Errorf("bench: %d delivering members did not settle: %w", members, err)
	}
	time.Sleep(500 * time.Millisecond) // the members' fetchers reach the log's end
	membersCPU := func() (d time.Duration) {
		for _, m := range ms {
			d += cpuOf(m.cmd.Process.Pid)
		}
		return d
	}
	cpu0, self0, switches0 := membersCPU(), selfCPU(), contextSwitches()
	start := time.Now()
	if err := c.produceKeys(deliverTopic, n, func(i int) string { return fmt.Sprintf("key-%d", i%keyCount) }); err != nil {
		return 0, 0, 0, err
	}
	produced = time.Since(start)
	if err := ep.span.wait(int64(n), 10*time.Minute); err != nil {
		return 0, 0, 0, err
	}
	cpu.members += membersCPU() - cpu0
	cpu.bench += selfCPU() - self0
	cpu.switches += contextSwitches() - switches0
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.span.elapsed(), produced, ep.sum, nil
}
