package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/testutil"
)

// The soak: a group of members on three brokers and three etcd members
// while a nemesis injects faults from the matrix's catalogue for a long
// time, with the matrix's checker over the whole run and the members'
// resources sampled for growth. It runs only when asked:
//
//	make soak                                   # SOAK=30m
//	KEYSHARE_SOAK=10m go test -run TestSoak -timeout 40m ./chaos/
//	KEYSHARE_SOAK=10m KEYSHARE_SOAK_SEED=42 ...  # the same nemesis choices
//	KEYSHARE_KAFKA=apache KEYSHARE_SOAK=10m ...   # on three Apache brokers
const (
	soakRate    = 400.0 // records per second
	soakKeys    = 1000
	soakParts   = 4
	soakMembers = 4
)

// nemesisFault is one kind of fault the soak's nemesis picks.
type nemesisFault struct {
	name string
	// etcd: the fault acts on etcd's members (two such are never run at
	// once: together they could take the quorum for longer than meant).
	etcd bool
	run  func(e *env, rng *rand.Rand)
}

func soakFaults(apache bool) []nemesisFault {
	faults := []nemesisFault{
		{name: "SIGKILL a member, a new one started", run: func(e *env, rng *rand.Rand) { kill(e, pick(e, rng)) }},
		{name: "SIGKILL the leader, a new member started", run: func(e *env, _ *rand.Rand) { kill(e, waitLeader(e)) }},
		{name: "SIGSTOP a member for 2.5×TTL", run: func(e *env, rng *rand.Rand) { pause(e, pick(e, rng)) }},
		{name: "graceful leave", run: func(e *env, rng *rand.Rand) {
			if len(e.members()) > 2 {
				e.fault()
				e.stop(pick(e, rng), syscall.SIGTERM)
			}
		}},
		{name: "join", run: func(e *env, _ *rand.Rand) {
			if len(e.members()) < 6 {
				e.fault()
				e.start()
			}
		}},
		{name: "etcd member killed, restarted 3 s later", etcd: true, run: func(e *env, rng *rand.Rand) {
			i := rng.IntN(3)
			if err := e.etcdCluster.Stop(i); err != nil {
				e.t.Errorf("stop etcd member %d: %v", i, err)
				return
			}
			e.fault()
			time.Sleep(3 * time.Second)
			if err := e.etcdCluster.Restart(i); err != nil {
				e.t.Errorf("restart etcd member %d: %v", i, err)
			}
		}},
		{name: "etcd leader isolated 5 s (leadership moves)", etcd: true, run: func(e *env, _ *rand.Rand) {
			i := etcdLeader(e)
			e.etcdCluster.Isolate(i)
			e.fault()
			time.Sleep(5 * time.Second)
			e.etcdCluster.Heal(i)
		}},
		{name: "partition added", run: func(e *env, _ *rand.Rand) { addPartition(e, 8) }},
		{name: "operator pause, resume 2–8 s later", run: func(e *env, rng *rand.Rand) { pauseGroup(e, time.Duration(2+rng.IntN(7))*time.Second) }},
	}
	if apache {
		faults = append(faults,
			nemesisFault{name: "broker SIGKILL, restarted", run: func(e *env, _ *rand.Rand) { killBrokers(e, 1) }},
			nemesisFault{name: "partition leadership moves", run: func(e *env, _ *rand.Rand) { moveLeaders(e, 1) }})
	} else {
		faults = append(faults, nemesisFault{name: "partition leadership moves", run: func(e *env, rng *rand.Rand) {
			e.mu.Lock()
			k, parts := e.kafkaSrv, e.parts
			e.mu.Unlock()
			e.fault()
			for p := range parts {
				if err := k.MoveTopicPartition(topic, p, rng.Int32N(3)); err != nil {
					e.t.Errorf("move partition %d: %v", p, err)
				}
			}
			k.RehashCoordinators()
		}})
	}
	return faults
}

// pick is a random running member.
func pick(e *env, rng *rand.Rand) string {
	ids := e.members()
	if len(ids) == 0 {
		e.t.Fatal("no member running")
	}
	return ids[rng.IntN(len(ids))]
}

// addPartition adds one partition to the topic, up to most.
func addPartition(e *env, most int32) {
	e.mu.Lock()
	n := e.parts
	e.mu.Unlock()
	if n >= most {
		return
	}
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "log_level": 3})
	if err != nil {
		e.t.Error(err)
		return
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.CreatePartitions(ctx, []kafka.PartitionsSpecification{{Topic: topic, IncreaseTo: int(n + 1)}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		e.t.Errorf("add partition %d: %v %v", n, err, res)
		return
	}
	e.mu.Lock()
	e.parts = n + 1
	e.mu.Unlock()
	e.fault()
}

// pauseGroup pauses the group as an operator would, then resumes it.
func pauseGroup(e *env, hold time.Duration) {
	g, err := admin.Open(e.cli, kafka.ConfigMap{"bootstrap.servers": e.brokers, "log_level": 3}, "/keyshare", group)
	if err != nil {
		e.t.Error(err)
		return
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Pause(ctx, "soak", "the nemesis"); err != nil {
		e.t.Errorf("pause: %v", err)
		return
	}
	e.fault()
	time.Sleep(hold)
	if _, err := g.Resume(ctx); err != nil {
		e.t.Errorf("resume: %v", err)
	}
}

// TestSoak is the long run: see the comment at the top of the file.
func TestSoak(t *testing.T) {
	d := os.Getenv("KEYSHARE_SOAK")
	if d == "" {
		t.Skip("KEYSHARE_SOAK unset: the soak runs with make soak (SOAK=30m), or KEYSHARE_SOAK=10m go test -run TestSoak ./chaos/")
	}
	dur, err := time.ParseDuration(d)
	if err != nil || dur < time.Minute {
		t.Fatalf("KEYSHARE_SOAK=%q: want a duration of at least 1m, such as 30m", d)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KEYSHARE_SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("KEYSHARE_SOAK_SEED=%q: want a number", s)
		}
	}
	t.Logf("soak for %v, seed %d (KEYSHARE_SOAK_SEED=%d repeats the nemesis's choices)", dur, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	apache := testutil.KafkaBackend() == testutil.BackendApache

	e := newEnv(t, soakParts, 3, 3)
	t.Cleanup(func() { e.keepOnFailure(seed) }) // before newEnv's cleanups: etcd still serves
	for range soakMembers {
		e.start()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obsDone := make(chan struct{})
	go func() { defer close(obsDone); e.observeCommits(ctx) }()
	samples := make(chan []resourceSample, 1)
	go func() { samples <- e.sampleResources(ctx, 10*time.Second) }()
	prodErr := make(chan error, 1)
	go func() { prodErr <- e.produce(ctx, int(soakRate*dur.Seconds()), soakKeys, soakRate) }()

	injected := e.nemesis(rng, soakFaults(apache), time.Now().Add(dur-30*time.Second))
	if err := <-prodErr; err != nil {
		t.Fatalf("producer: %v", err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !e.committedAtEnd() {
		if time.Now().After(deadline) {
			t.Error("the committed offsets did not reach the end within 3 minutes of the last record")
			e.dumpMetrics()
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	res := <-samples
	for _, id := range e.members() {
		e.stop(id, syscall.SIGTERM)
	}
	<-obsDone

	bound := 3 * (maxUnflushed + maxInFlight) // some faults end every session at once
	r := e.check("soak", bound)
	if r.Lost > 0 || r.OrderViolations > 0 || r.CommitRegression > 0 || r.CommitPastUndone > 0 || r.Overlap.Overlaps > 0 {
		t.Errorf("guarantee broken: %s", r)
		e.dumpLogs()
	}
	if r.WorstPerFault > bound {
		t.Errorf("duplicates over the bound: %s", r)
	}
	t.Log(r)
	t.Log(soakReport(dur, seed, injected, res))
	checkFlat(t, dur, res)
}

// nemesis injects faults until `until`: every 10–30 s one, or one time in
// four two at once, and returns how many of each kind it injected.
func (e *env) nemesis(rng *rand.Rand, faults []nemesisFault, until time.Time) map[string]int {
	injected := map[string]int{}
	for {
		time.Sleep(time.Duration(10+rng.IntN(21)) * time.Second)
		if time.Now().After(until) {
			return injected
		}
		now := []nemesisFault{faults[rng.IntN(len(faults))]}
		if rng.IntN(4) == 0 {
			second := faults[rng.IntN(len(faults))]
			if second.name != now[0].name && !(second.etcd && now[0].etcd) {
				now = append(now, second)
			}
		}
		var wg sync.WaitGroup
		for _, f := range now {
			injected[f.name]++
			e.t.Logf("nemesis: %s", f.name)
			seed := rng.Uint64()
			wg.Go(func() { f.run(e, rand.New(rand.NewPCG(seed, seed))) })
		}
		wg.Wait()
	}
}

// soakReport is the soak's table: the faults by kind and the resource
// slopes.
func soakReport(dur time.Duration, seed uint64, injected map[string]int, samples []resourceSample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak %v, seed %d, %d resource samples\nfaults injected:\n", dur, seed, len(samples))
	for _, name := range slices.Sorted(maps.Keys(injected)) {
		fmt.Fprintf(&b, "  %-50s %d\n", name, injected[name])
	}
	for _, s := range slopes(samples) {
		judged := "judged"
		if !s.judged {
			judged = "reported only"
		}
		fmt.Fprintf(&b, "%-34s first %10.1f  last %10.1f  slope %+9.3f per minute (after warm-up; %s)\n", s.name, s.first, s.last, s.perMinute, judged)
	}
	return b.String()
}

// keepOnFailure copies a failed soak's evidence out of the test's temporary
// directory, which is removed after the test: the members' logs, record
// logs and audit logs, and etcd's history of the group as JSON lines
// (events.jsonl: the key, value and revisions of every write). The seed
// goes in the directory's name, so the run can be repeated.
func (e *env) keepOnFailure(seed uint64) {
	if !e.t.Failed() {
		return
	}
	keep, err := os.MkdirTemp("", fmt.Sprintf("keyshare-soak-%d-", seed))
	if err != nil {
		e.t.Logf("keep the soak's logs: %v", err)
		return
	}
	for _, pattern := range []string{"*.log", "*.jsonl", "*.audit"} {
		files, _ := filepath.Glob(filepath.Join(e.dir, pattern))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				_ = os.WriteFile(filepath.Join(keep, filepath.Base(f)), b, 0o644)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var events strings.Builder
	for _, ev := range e.history(ctx, "/keyshare/"+group+"/") {
		line, _ := json.Marshal(map[string]any{"type": ev.Type.String(), "key": string(ev.Kv.Key), "value": string(ev.Kv.Value),
			"mod_revision": ev.Kv.ModRevision, "create_revision": ev.Kv.CreateRevision, "lease": ev.Kv.Lease})
		events.Write(append(line, '\n'))
	}
	_ = os.WriteFile(filepath.Join(keep, "events.jsonl"), []byte(events.String()), 0o644)
	e.t.Logf("the failed soak's logs and etcd history are kept in %s (KEYSHARE_SOAK_SEED=%d repeats the nemesis)", keep, seed)
}
