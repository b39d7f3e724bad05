package main

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/bench/worksleep"
	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// The skew benchmark: throughput of 4 members × 16 workers on
// skewed load with the leader balancing hash width (BalanceWidth) or
// measured load (BalanceLoad), the time ranges take to settle when the
// hot keys change mid-run, the hash space moved, and the etcd cost of
// the load reports.
//
// Knobs (environment): KEYSHARE_BENCH_SKEW_N (records of the Zipf
// workloads, default 20,000), KEYSHARE_BENCH_SKEW_UNEVEN_N (records of
// the uneven-partitions workload, default 80,000), KEYSHARE_BENCH_SKEW_WORK
// (sleep per record, default 5ms), KEYSHARE_BENCH_SKEW_BALANCE (the modes
// to run, default "width,load"), KEYSHARE_BENCH_SKEW_INTERVAL (the load
// report interval, default 1s: a run lasts seconds, and the default 5 s
// would give the leader one or two reports; the members' LoadCooldown is
// five intervals, not the default 30 s, for the same reason).

// skewTopics are the benchmark's topics and their partition counts.
var skewTopics = map[string]int32{"skew-zipf-1": 1, "skew-zipf-4": 4, "skew-uneven": 4, "skew-zipf-1-change": 1, "skew-zipf-4-change": 4, "skew-uneven-change": 4}

const (
	skewMembers = 4
	skewWorkers = 16
	skewKeys    = 10_000
	zipfS       = 1.1
)

// skewRecord is one record of a workload, produced to an explicit
// partition; second marks the records after the hot keys change.
type skewRecord struct {
	key    string
	part   int32
	second bool
}

// skewWorkload is the records of one run, in production order.
type skewWorkload struct {
	name, topic string
	parts       int32
	recs        []skewRecord
}

// zipfWorkload draws n keys from Zipf(s = zipfS) over skewKeys keys, each
// key on partition fnv(key) mod parts. With change, the second half draws
// from the same distribution over a permutation of the keys: other keys
// are hot.
func zipfWorkload(topic string, parts int32, n int, change bool) skewWorkload {
	rng := rand.New(rand.NewPCG(11, uint64(parts)))
	z := rand.NewZipf(rng, zipfS, 1, skewKeys-1)
	perm := rng.Perm(skewKeys)
	name := fmt.Sprintf("Zipf s=%.1f over 10,000 keys, %d partitions", zipfS, parts)
	if parts == 1 {
		name = fmt.Sprintf("Zipf s=%.1f over 10,000 keys, 1 partition", zipfS)
	}
	w := skewWorkload{name: name, topic: topic, parts: parts}
	for i := range n {
		rank := int(z.Uint64())
		second := change && i >= n/2
		if second {
			rank = perm[rank]
		}
		key := fmt.Sprintf("key-%d", rank)
		h := fnv.New32a()
		h.Write([]byte(key))
		w.recs = append(w.recs, skewRecord{key: key, part: int32(h.Sum32() % uint32(parts)), second: second})
	}
	return w
}

// unevenShares is the traffic of each partition in the uneven workload.
var unevenShares = []float64{0.55, 0.15, 0.15, 0.15}

// unevenWorkload draws n uniform keys over skewKeys keys onto 4 partitions
// with unevenShares of the traffic. With change, the second half's heavy
// partition is partition 2 instead of 0.
func unevenWorkload(topic string, n int, change bool) skewWorkload {
	rng := rand.New(rand.NewPCG(13, 17))
	w := skewWorkload{name: "10,000 uniform keys, 4 partitions at 55/15/15/15%", topic: topic, parts: 4}
	for i := range n {
		second := change && i >= n/2
		x, p := rng.Float64(), int32(0)
		for acc := unevenShares[0]; x >= acc && p < 3; acc += unevenShares[p] {
			p++
		}
		if second {
			p = (p + 2) % 4 // partition 0's traffic goes to 2 and back
		}
		w.recs = append(w.recs, skewRecord{key: fmt.Sprintf("key-%d", rng.IntN(skewKeys)), part: p, second: second})
	}
	return w
}

// produce writes w's records, each to its partition; the value says the
// phase ("1" or "2").
func (w skewWorkload) produce(brokers string) error {
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": brokers, "linger.ms": 5, "log_level": 3})
	if err != nil {
		return err
	}
	defer p.Close()
	acks := make(chan kafka.Event, len(w.recs))
	for _, r := range w.recs {
		v := []byte("1")
		if r.second {
			v = []byte("2")
		}
		if err := p.Produce(&kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &w.topic, Partition: r.part}, Key: []byte(r.key), Value: v}, acks); err != nil {
			return err
		}
	}
	for range w.recs {
		if m := (<-acks).(*kafka.Message); m.TopicPartition.Error != nil {
			return m.TopicPartition.Error
		}
	}
	return nil
}

// floors are the lower bounds of w's completion time with work c per
// record: the busiest key's records run one at a time (p1·N·c), and all
// records share skewMembers × skewWorkers workers.
func (w skewWorkload) floors(c time.Duration) (hottest, ideal time.Duration, p1 float64) {
	count := map[string]int{}
	best := 0
	for _, r := range w.recs {
		k := fmt.Sprintf("%d/%s", r.part, r.key)
		count[k]++
		best = max(best, count[k])
	}
	n := len(w.recs)
	return time.Duration(best) * c, time.Duration(n) * c / (skewMembers * skewWorkers), float64(best) / float64(n)
}

// skewRun is what one run measured.
type skewRun struct {
	took time.Duration // first record handled to last
	// settle is from the first second-phase record handled to the last
	// change of a range's owner after it (0: nothing moved).
	settle time.Duration
	// moved is the hash space that changed owner during the run, in
	// partitions' worth; gens the assignment generations written.
	moved float64
	gens  int
	// Load reports seen in etcd: puts, their bytes, over the run; and the
	// same of the hot keys' names (hotkeys/<member-id>), which ride in
	// the reports' transactions when they changed.
	reportPuts, reportBytes int
	namePuts, nameBytes     int
	elapsed                 time.Duration
}

func (c *benchCommand) skew(ctx context.Context) error {
	p, err := c.skewParams()
	if err != nil {
		return err
	}
	static := []skewWorkload{zipfWorkload("skew-zipf-1", 1, p.n, false), zipfWorkload("skew-zipf-4", 4, p.n, false), unevenWorkload("skew-uneven", p.unevenN, false)}
	changing := []skewWorkload{zipfWorkload("skew-zipf-1-change", 1, p.n, true), zipfWorkload("skew-zipf-4-change", 4, p.n, true), unevenWorkload("skew-uneven-change", p.unevenN, true)}

	c.printf("## 11. Skewed load: balancing width or measured load\n\n%d members × %d workers, each record sleeps %s (I/O-bound), records produced once the members have settled (each run starts at the log end: AutoOffsetReset latest); time is from the first record handled to the last, the median of %d runs [min–max]. Members report load every %s (the default is 5 s; a run lasts seconds). `width` is `--balance width` (hash space by weight, the layout before load reports), `load` the default.\n\n",
		skewMembers, skewWorkers, p.work, c.runs, p.interval)
	c.printf("Two floors bound any assignment: the hottest key's records run one at a time (p1·N·c, p1 its share of the records), and all records share %d workers (N·c ÷ %d).\n\n", skewMembers*skewWorkers, skewMembers*skewWorkers)
	if err := c.staticSkewTable(ctx, static, p); err != nil {
		return err
	}
	if err := c.changingSkewTable(ctx, changing, p); err != nil {
		return err
	}
	c.printf("\n")
	return nil
}

// skewParams is the skew scenario's records per workload (n, and unevenN
// for the uneven one), the work per record, the load report interval and
// the balances compared.
type skewParams struct {
	n, unevenN     int
	work, interval time.Duration
	balances       []coord.Balance
}

// skewParams reads the scenario's parameters: the defaults, smaller with
// --quick, or as the KEYSHARE_BENCH_SKEW_* variables set them.
func (c *benchCommand) skewParams() (skewParams, error) {
	p := skewParams{
		n:        envInt("KEYSHARE_BENCH_SKEW_N", 20_000),
		unevenN:  envInt("KEYSHARE_BENCH_SKEW_UNEVEN_N", 80_000),
		work:     5 * time.Millisecond,
		interval: time.Second,
	}
	if c.quick {
		p.n, p.unevenN = 4000, 16_000
	}
	if v := os.Getenv("KEYSHARE_BENCH_SKEW_WORK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return p, cli.Usage(fmt.Errorf("KEYSHARE_BENCH_SKEW_WORK %q: %v", v, err))
		}
		p.work = d
	}
	if v := os.Getenv("KEYSHARE_BENCH_SKEW_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return p, cli.Usage(fmt.Errorf("KEYSHARE_BENCH_SKEW_INTERVAL %q: %v", v, err))
		}
		p.interval = d
	}
	for _, b := range strings.Split(cmp.Or(os.Getenv("KEYSHARE_BENCH_SKEW_BALANCE"), "width,load"), ",") {
		p.balances = append(p.balances, coord.Balance(b))
	}
	return p, nil
}

// staticSkewTable prints the table of workloads whose hot keys stay hot,
// each balance's median of c.runs, and whether 1.5× the width-only
// throughput is within the floors' reach.
func (c *benchCommand) staticSkewTable(ctx context.Context, static []skewWorkload, p skewParams) error {
	c.printf("| workload | records | p1 | hottest-key floor | worker floor | balance | time | records/s | × width |\n|---|---|---|---|---|---|---|---|---|\n")
	var verdicts []string
	for _, w := range static {
		hot, ideal, p1 := w.floors(p.work)
		var widthRate float64
		for _, b := range p.balances {
			s, err := c.repeat(func() (time.Duration, error) {
				r, err := c.skewRun(ctx, w, b, p.work, p.interval)
				return r.took, err
			})
			if err != nil {
				return err
			}
			rate := float64(len(w.recs)) / s.med.Seconds()
			if b == coord.BalanceWidth {
				widthRate = rate
				// The goal, 1.5× the width-only throughput, against the
				// higher floor.
				goal, floor, which := s.med.Seconds()/1.5, hot.Seconds(), "hottest key's"
				if ideal > hot {
					floor, which = ideal.Seconds(), "workers'"
				}
				reach := "out of reach for any assignment"
				if floor < goal {
					reach = "reachable"
				}
				verdicts = append(verdicts, fmt.Sprintf("- %s: 1.5× width needs %.2f s or less; the %s floor is %.2f s: %s.", w.name, goal, which, floor, reach))
			}
			vs := "—"
			if widthRate > 0 {
				vs = fmt.Sprintf("%.2f×", rate/widthRate)
			}
			c.printf("| %s | %d | %.1f%% | %.2f s | %.2f s | %s | %s | %.0f | %s |\n", w.name, len(w.recs), 100*p1, hot.Seconds(), ideal.Seconds(), b, s, rate, vs)
		}
	}
	c.printf("\n%s\n", strings.Join(verdicts, "\n"))
	return nil
}

// changingSkewTable prints the table of workloads whose hot keys change
// mid-run: one run of each balance, with what moved and the load reports'
// etcd cost.
func (c *benchCommand) changingSkewTable(ctx context.Context, changing []skewWorkload, p skewParams) error {
	c.printf("\n**Hot keys change mid-run.** The same workloads, but the second half of the records draws from a permutation of the keys (Zipf: other keys are hot) or sends partition 0's traffic to partition 2 (uneven). One run each. *Settle* is from the first second-half record handled to the last change of a range's owner (— if none moved); *moved* is the hash space that changed owner, in partitions' worth, and per assignment generation written during the run; the load reports' etcd cost is what the run wrote to `load/<member-id>`, and at the default 5 s interval; the hot keys' names, what it wrote to `hotkeys/<member-id>` (in the reports' transactions, when they changed).\n\n")
	c.printf("| workload | balance | time | settle | moved (per generation) | load reports: puts/s, bytes/s | at 5 s: bytes/s | bytes per report | hot key names: puts/s, bytes/s |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range changing {
		for _, b := range p.balances {
			r, err := c.skewRun(ctx, w, b, p.work, p.interval)
			if err != nil {
				return err
			}
			settle := "—"
			if r.settle > 0 {
				settle = fmt.Sprintf("%.2f s", r.settle.Seconds())
			}
			per := 0.0
			if r.gens > 0 {
				per = r.moved / float64(r.gens)
			}
			size := 0
			if r.reportPuts > 0 {
				size = r.reportBytes / r.reportPuts
			}
			secs := r.elapsed.Seconds()
			c.printf("| %s | %s | %.2f s | %s | %.3f (%.3f over %d) | %.1f, %.0f | %.0f | %d | %.1f, %.0f |\n", w.name, b, r.took.Seconds(), settle, r.moved, per, r.gens,
				float64(r.reportPuts)/secs, float64(r.reportBytes)/secs, float64(skewMembers*size)/5, size, float64(r.namePuts)/secs, float64(r.nameBytes)/secs)
		}
	}
	return nil
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// skewRun handles w's records with a fresh group of skewMembers members
// balancing by b, sampling the group's ranges and load reports in etcd
// meanwhile.
func (c *benchCommand) skewRun(ctx context.Context, w skewWorkload, b coord.Balance, work, interval time.Duration) (skewRun, error) {
	var s span
	var secondAt atomic.Int64 // unix nanos of the first second-phase record handled
	// The members settle on an empty log end first, so that the run
	// measures the balance, not the first joins' handoffs.
	ms, err := c.startMembersWith(w.topic, skewMembers, skewWorkers, "latest", func(cfg *consumer.Config) {
		// A cool-down of five reports instead of the default 30 s, so
		// that a run of seconds can show the leader following hot keys
		// that change.
		cfg.Balance, cfg.LoadReportInterval, cfg.LoadCooldown = b, interval, 5*interval
		cfg.Handler = func(ctx context.Context, m *kafka.Message) error {
			if err := worksleep.Sleep(ctx, work); err != nil {
				return err
			}
			if len(m.Value) > 0 && m.Value[0] == '2' {
				secondAt.CompareAndSwap(0, time.Now().UnixNano())
			}
			s.hit()
			return nil
		}
	})
	if err != nil {
		return skewRun{}, err
	}
	defer ms.stop()
	smp, err := c.sampleSkew(ctx, ms.group)
	if err != nil {
		return skewRun{}, err
	}
	start := time.Now()
	if err := w.produce(c.brokers); err != nil {
		smp.stop()
		return skewRun{}, err
	}
	err = s.wait(int64(len(w.recs)), 10*time.Minute)
	r := smp.stop()
	if err != nil {
		return skewRun{}, err
	}
	r.took, r.elapsed = s.elapsed(), time.Since(start)
	if at := secondAt.Load(); at > 0 && !smp.lastMove.IsZero() && smp.lastMove.UnixNano() > at {
		r.settle = time.Duration(smp.lastMove.UnixNano() - at)
	}
	return r, nil
}

// skewSampler reads a group's ranges and load reports from etcd every
// 200 ms.
type skewSampler struct {
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	r        skewRun
	lastMove time.Time
}

func (c *benchCommand) sampleSkew(ctx context.Context, group string) (*skewSampler, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcd}, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	keys := schema.Group{Prefix: "", Name: group}.Keys()
	sctx, cancel := context.WithCancel(ctx)
	smp := &skewSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(smp.done)
		defer cli.Close()
		var prev []schema.RangeState
		var prevGen int64
		seen := map[string]int64{} // load key → ModRevision last counted
		for first := true; sctx.Err() == nil; first = false {
			if snap, err := coord.ReadSnapshot(sctx, cli, groupOf(keys)); err == nil {
				moved := ownerChange(prev, snap.Ranges)
				smp.mu.Lock()
				if prev != nil {
					smp.r.moved += moved
					if moved > 0 {
						smp.lastMove = time.Now()
					}
					if snap.Generation.Generation != prevGen {
						smp.r.gens++
					}
				}
				smp.mu.Unlock()
				prev, prevGen = snap.Ranges, snap.Generation.Generation
			}
			if resp, err := cli.Txn(sctx).Then(clientv3.OpGet(keys.Loads(), clientv3.WithPrefix()), clientv3.OpGet(keys.HotKeysPrefix(), clientv3.WithPrefix())).Commit(); err == nil {
				smp.mu.Lock()
				for _, kv := range append(resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs...) {
					// The reports already there at the start were
					// written before the run.
					if seen[string(kv.Key)] != kv.ModRevision && !first {
						// Keys and values: what each put sends etcd.
						if strings.HasPrefix(string(kv.Key), keys.HotKeysPrefix()) {
							smp.r.namePuts++
							smp.r.nameBytes += len(kv.Key) + len(kv.Value)
						} else {
							smp.r.reportPuts++
							smp.r.reportBytes += len(kv.Key) + len(kv.Value)
						}
					}
					seen[string(kv.Key)] = kv.ModRevision
				}
				smp.mu.Unlock()
			}
			_ = worksleep.Sleep(sctx, 200*time.Millisecond)
		}
	}()
	return smp, nil
}

func (smp *skewSampler) stop() skewRun {
	smp.cancel()
	<-smp.done
	smp.mu.Lock()
	defer smp.mu.Unlock()
	return smp.r
}

// ownerChange is the hash space, in partitions' worth, whose owner differs
// between two samples of a group's ranges (space owned in only one of them
// counts as well: it changed hands through the leader).
func ownerChange(before, after []schema.RangeState) float64 {
	type seg struct {
		lo, hi uint64
		owner  string
	}
	byTP := func(rs []schema.RangeState) map[assign.TopicPartition][]seg {
		out := map[assign.TopicPartition][]seg{}
		for _, r := range rs {
			out[r.TP()] = append(out[r.TP()], seg{r.Record.Lo, r.Record.Hi, r.Record.Owner})
		}
		return out
	}
	b, a := byTP(before), byTP(after)
	tps := map[assign.TopicPartition]bool{}
	for t := range b {
		tps[t] = true
	}
	for t := range a {
		tps[t] = true
	}
	ownerAt := func(ss []seg, h uint64) string {
		for _, s := range ss {
			if s.lo <= h && h < s.hi {
				return s.owner
			}
		}
		return ""
	}
	var moved uint64
	for t := range tps {
		// Cut points of both layouts: between two, each side has one
		// owner.
		cuts := []uint64{0, ledger.HashSpace}
		for _, s := range append(slices.Clone(b[t]), a[t]...) {
			cuts = append(cuts, s.lo, s.hi)
		}
		slices.Sort(cuts)
		cuts = slices.Compact(cuts)
		for i := 0; i+1 < len(cuts); i++ {
			if ownerAt(b[t], cuts[i]) != ownerAt(a[t], cuts[i]) {
				moved += cuts[i+1] - cuts[i]
			}
		}
	}
	return float64(moved) / float64(ledger.HashSpace)
}
