package coord_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testutil.EtcdGoroutines()...)
}

// static returns a partition source with fixed counts.
func static(counts map[string]int32) coord.PartitionSource {
	return func(_ context.Context, topics []string) (map[string]int32, error) {
		out := make(map[string]int32)
		for _, t := range topics {
			if n, ok := counts[t]; ok {
				out[t] = n
			}
		}
		return out, nil
	}
}

func testConfig(t *testing.T, id string, counts map[string]int32) coord.Config {
	cfg := coord.DefaultConfig()
	cfg.Group = "g"
	cfg.MemberID = id
	for topic := range counts {
		cfg.Topics = append(cfg.Topics, topic)
	}
	cfg.Partitions = static(counts)
	cfg.SessionTTL = 2 * time.Second
	cfg.DrainTimeout = 10 * time.Second
	cfg.RebalanceDebounce = 20 * time.Millisecond
	cfg.Logger = testutil.Logger(t)
	return cfg
}

// join starts a member with its own etcd client (as a separate process would
// have) and closes it when the test ends.
func join(t *testing.T, endpoints []string, cfg coord.Config) (*coord.Session, *clientv3.Client) {
	t.Helper()
	cli := testutil.NewEtcdClient(t, endpoints)
	s, err := coord.Join(t.Context(), cli, cfg)
	if err != nil {
		t.Fatalf("join %s: %v", cfg.MemberID, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, cli
}

// waitFor is testutil.WaitFor.
var waitFor = testutil.WaitFor

func snapshot(t *testing.T, cli *clientv3.Client) *schema.Snapshot {
	t.Helper()
	snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// pollSnapshots reads group g's snapshot every 10 ms and hands it to look,
// until the returned stop is called (stop returns once look has run its
// last time, so what look gathered can be read then).
func pollSnapshots(t *testing.T, cli *clientv3.Client, look func(*schema.Snapshot)) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if snap, err := coord.ReadSnapshot(t.Context(), cli, schema.Group{Name: "g"}); err == nil {
				look(snap)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// checkCoverage fails unless every partition is covered exactly by ranges.
func checkCoverage(t *testing.T, snap *schema.Snapshot, counts map[string]int32) {
	t.Helper()
	byTP := make(map[assign.TopicPartition][]schema.RangeState)
	for _, r := range snap.Ranges {
		byTP[r.TP()] = append(byTP[r.TP()], r)
	}
	for topic, n := range counts {
		for p := range n {
			at := uint64(0)
			for _, r := range byTP[assign.TopicPartition{Topic: topic, Partition: p}] {
				if r.Record.Lo != at {
					t.Fatalf("%s/%d: range %s starts at %d, want %d", topic, p, r.Record.Range(), r.Record.Lo, at)
				}
				at = r.Record.Hi
			}
			if at != ledger.HashSpace {
				t.Fatalf("%s/%d: ranges end at %d", topic, p, at)
			}
		}
	}
}

// settled reports whether every range is active and owned by a live member
// and members own within one partition (or hash) of an even share.
func settled(snap *schema.Snapshot) bool {
	if len(snap.Ranges) == 0 {
		return false
	}
	for _, r := range snap.Ranges {
		if _, ok := snap.Members[r.Record.Owner]; !ok || r.Record.State != schema.StateActive {
			return false
		}
		if snap.Members[r.Record.Owner].Leaving {
			return false
		}
	}
	return true
}

func TestJoinAssignsAndLeaderMoves(t *testing.T) {
	t.Parallel()
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 3}
	a, _ := join(t, e.Endpoints, testConfig(t, "a", counts))
	waitFor(t, "a leads", 30*time.Second, a.IsLeader)
	b, bcli := join(t, e.Endpoints, testConfig(t, "b", counts))
	waitFor(t, "both own ranges", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("a")) > 0 && len(snap.Owned("b")) > 0
	})
	checkCoverage(t, snapshot(t, cli), counts)
	if b.IsLeader() {
		t.Fatal("b leads while a does")
	}

	// The leader's session closes: b takes over and gets all ranges.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b leads", 30*time.Second, b.IsLeader)
	waitFor(t, "b owns everything", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("b")) == len(snap.Ranges)
	})

	// The leader's lease is revoked while its process runs: it steps down
	// and c leads; b's session is gone, so b must not think it leads.
	c, _ := join(t, e.Endpoints, testConfig(t, "c", counts))
	leases, err := bcli.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var bLease clientv3.LeaseID
	resp, err := cli.Get(t.Context(), "/keyshare/g/members/b")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get b's registration: %v %v", resp, err)
	}
	bLease = clientv3.LeaseID(resp.Kvs[0].Lease)
	if len(leases.Leases) == 0 {
		t.Fatal("no leases")
	}
	if _, err := cli.Revoke(t.Context(), bLease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b's session ends", 30*time.Second, func() bool { return b.Ctx().Err() != nil })
	if !errors.Is(context.Cause(b.Ctx()), coord.ErrSessionLost) {
		t.Fatalf("b's session ended with %v, want ErrSessionLost", context.Cause(b.Ctx()))
	}
	waitFor(t, "b stops leading", 5*time.Second, func() bool { return !b.IsLeader() })
	waitFor(t, "c leads", 30*time.Second, c.IsLeader)
	waitFor(t, "c owns everything", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("c")) == len(snap.Ranges)
	})
	checkCoverage(t, snapshot(t, cli), counts)
}

func TestDuplicateMemberRefused(t *testing.T) {
	_, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	join(t, e.Endpoints, testConfig(t, "same", counts))
	cli := testutil.NewEtcdClient(t, e.Endpoints)
	_, err := coord.Join(t.Context(), cli, testConfig(t, "same", counts))
	if !errors.Is(err, coord.ErrMemberExists) || !strings.Contains(err.Error(), `"same"`) {
		t.Fatalf("second join: %v, want ErrMemberExists naming the id", err)
	}
}

func TestBadConfigRefusedBeforeWriting(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	cases := map[string]func(*coord.Config){
		"ttl zero":           func(c *coord.Config) { c.SessionTTL = 0 },
		"ttl negative":       func(c *coord.Config) { c.SessionTTL = -time.Second },
		"empty group":        func(c *coord.Config) { c.Group = "" },
		"slash in id":        func(c *coord.Config) { c.MemberID = "a/b" },
		"weight zero":        func(c *coord.Config) { c.Weight = 0 },
		"weight neg":         func(c *coord.Config) { c.Weight = -3 },
		"weight huge":        func(c *coord.Config) { c.Weight = assign.MaxWeight + 1 },
		"no topics":          func(c *coord.Config) { c.Topics = nil },
		"no source":          func(c *coord.Config) { c.Partitions = nil },
		"drain zero":         func(c *coord.Config) { c.DrainTimeout = 0 },
		"drain past an hour": func(c *coord.Config) { c.DrainTimeout = time.Hour + time.Millisecond },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, "m", counts)
			mutate(&cfg)
			if _, err := coord.Join(t.Context(), cli, cfg); err == nil {
				t.Fatal("join succeeded")
			} else {
				t.Log(err)
			}
			resp, err := cli.Get(t.Context(), "/keyshare/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || resp.Count != 0 {
				t.Fatalf("keys written: %v %v", resp.Count, err)
			}
		})
	}
}

func TestEtcdUnreachableFailsInBoundedTime(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cfg := testConfig(t, "m", map[string]int32{"t": 1})
	cfg.StartTimeout = time.Second
	start := time.Now()
	_, err = coord.Join(t.Context(), cli, cfg)
	if err == nil || !strings.Contains(err.Error(), "reachable") {
		t.Fatalf("join: %v, want an error saying etcd is not reachable", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("join took %s to fail", took)
	}
}

// owner simulates a member's data side: it releases revoked ranges after a
// delay and logs when it gained and released each hash.
type owner struct {
	s     *coord.Session
	delay time.Duration
}

type event struct {
	at      time.Time
	member  string
	kind    string // "gain" or "release"
	tp      assign.TopicPartition
	r       ledger.HashRange
	genSeen int64
}

func (o *owner) run(t *testing.T, all *[]event, allMu *sync.Mutex) {
	have := make(map[string]bool) // range key+rev seen active
	for {
		select {
		case <-o.s.Ctx().Done():
			return
		case a := <-o.s.Updates():
			for _, r := range a.Ranges {
				id := fmt.Sprintf("%s@%d", r.Key, r.Rev)
				switch r.Record.State {
				case schema.StateActive:
					if !have[r.Key+r.Record.Range().String()] {
						have[r.Key+r.Record.Range().String()] = true
						allMu.Lock()
						*all = append(*all, event{time.Now(), o.s.ID(), "gain", r.TP(), r.Record.Range(), a.Generation})
						allMu.Unlock()
					}
				case schema.StateRevoking:
					if have[id] {
						continue
					}
					have[id] = true
					r := r
					go func() {
						time.Sleep(o.delay)
						allMu.Lock()
						*all = append(*all, event{time.Now(), o.s.ID(), "release", r.TP(), r.Record.Range(), a.Generation})
						allMu.Unlock()
						if err := o.s.ReleaseRanges(o.s.Ctx(), []coord.RangeRelease{{Range: r, Final: r.Entry}}); err != nil && o.s.Ctx().Err() == nil {
							t.Errorf("release %s: %v", r.Key, err)
						}
					}()
					delete(have, r.Key+r.Record.Range().String())
				}
			}
		}
	}
}

// startOwner joins member id as an owner (owner.run) that releases what is
// revoked from it after delay, recording its gains and releases in all.
func startOwner(t *testing.T, endpoints []string, id string, counts map[string]int32, delay time.Duration, all *[]event, allMu *sync.Mutex) *coord.Session {
	t.Helper()
	return startOwnerWith(t, endpoints, testConfig(t, id, counts), delay, all, allMu)
}

// startOwnerWith is startOwner with a config of the caller's.
func startOwnerWith(t *testing.T, endpoints []string, cfg coord.Config, delay time.Duration, all *[]event, allMu *sync.Mutex) *coord.Session {
	t.Helper()
	s, _ := join(t, endpoints, cfg)
	o := &owner{s: s, delay: delay}
	done := make(chan struct{})
	go func() { defer close(done); o.run(t, all, allMu) }()
	t.Cleanup(func() { _ = s.Close(); <-done })
	return s
}

// TestTwoPhaseHandoff checks that a hash is never gained by a new owner
// before its old owner released it, and that ranges that do not move are
// never revoked.
func TestTwoPhaseHandoff(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	var (
		allMu sync.Mutex
		all   []event
	)
	start := func(id string) *coord.Session {
		return startOwner(t, e.Endpoints, id, counts, 300*time.Millisecond, &all, &allMu)
	}
	start("a")
	waitFor(t, "a owns", 30*time.Second, func() bool { return settled(snapshot(t, cli)) })
	revBefore := make(map[string]int64)
	start("b")
	waitFor(t, "a and b settle", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("b")) > 0
	})
	for _, r := range snapshot(t, cli).Ranges {
		revBefore[r.Key] = r.Rev
	}
	start("c")
	waitFor(t, "a, b and c settle", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Owned("c")) > 0
	})
	checkCoverage(t, snapshot(t, cli), counts)

	// Every gain of a hash by a member other than its first owner must come
	// after a release of that hash.
	allMu.Lock()
	defer allMu.Unlock()
	type span struct {
		r     ledger.HashRange
		owner string
		freed bool
	}
	var held []span
	for _, ev := range all {
		switch ev.kind {
		case "release":
			for i := range held {
				if held[i].owner == ev.member && !held[i].r.Intersect(ev.r).Empty() {
					held[i].freed = true
				}
			}
		case "gain":
			for _, h := range held {
				if h.owner != ev.member && !h.freed && !h.r.Intersect(ev.r).Empty() {
					t.Fatalf("%s gained %s at %s while %s still held %s unreleased", ev.member, ev.r, ev.at.Format(time.StampMilli), h.owner, h.r)
				}
			}
			held = append(held, span{r: ev.r, owner: ev.member})
		}
	}
	if len(all) < 4 {
		t.Fatalf("only %d handoff events recorded: %v", len(all), all)
	}
}

// TestExpiredOwnerCannotWrite: once a member's lease is gone its ledger
// writes fail, even before the leader reassigns its ranges.
func TestExpiredOwnerCannotWrite(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	a, acli := join(t, e.Endpoints, testConfig(t, "a", counts))
	var asg schema.Assignment
	waitFor(t, "a owns a range", 30*time.Second, func() bool {
		select {
		case asg = <-a.Updates():
		default:
		}
		return len(asg.Ranges) == 1
	})
	r := asg.Ranges[0]
	write := func() error {
		return a.Flush(context.Background(), []coord.RangeFlush{{
			Range: r, Entry: ledger.Entry{Segments: []ledger.Segment{{Lo: 0, Hi: ledger.HashSpace, Next: 10}}},
		}})
	}
	if err := write(); err != nil {
		t.Fatalf("owner's write: %v", err)
	}
	resp, err := cli.Get(t.Context(), "/keyshare/g/members/a")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	err = write()
	var fe *coord.FencedError
	if !errors.As(err, &fe) || !fe.Session {
		t.Fatalf("write after lease expiry: %v, want a session FencedError", err)
	}
	_ = acli
}

// TestMalformedAssignmentRepaired: garbage in range records and ledger
// entries is reported and the leader writes a fresh generation covering the
// hash space again.
func TestMalformedAssignmentRepaired(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 2}
	cfg := testConfig(t, "a", counts)
	logs := &testutil.Buffer{}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info})
	join(t, e.Endpoints, cfg)
	waitFor(t, "assigned", 30*time.Second, func() bool { return settled(snapshot(t, cli)) })
	genBefore := snapshot(t, cli).Generation.Generation
	if _, err := cli.Put(t.Context(), "/keyshare/g/ranges/t/00000/0000000000", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), "/keyshare/g/ledger/t/00001/0000000000", `{"v":1,"segments":[{"lo":0,"hi":4294967296,"next":5,"pending":[7]}]}`); err != nil {
		t.Fatal(err)
	}
	// The leader reports each damaged value, naming its key.
	waitFor(t, "the leader to report both values", 30*time.Second, func() bool {
		l := logs.String()
		return strings.Contains(l, `bad value at \"/keyshare/g/ranges/t/00000/0000000000\"`) &&
			strings.Contains(l, `bad entry at \"/keyshare/g/ledger/t/00001/0000000000\": segment 0: pending offset 7 is not below next 5`)
	})
	waitFor(t, "repaired", 30*time.Second, func() bool {
		snap := snapshot(t, cli)
		return len(snap.Problems) == 0 && settled(snap) && snap.Generation.Generation > genBefore
	})
	checkCoverage(t, snapshot(t, cli), counts)
}

// testLogWriter passes log lines to t.Log.
type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
