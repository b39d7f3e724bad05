package coord_test

import (
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// hotFront is the true load of partition t/0 in the load tests: 8 busy
// worker-seconds per second over the first eighth of the hash space, 2 over
// the rest.
func hotFront(lo, hi uint64) float64 {
	const edge = ledger.HashSpace / 8
	over := func(a, b uint64) float64 {
		if x, y := max(a, lo), min(b, hi); x < y {
			return float64(y - x)
		}
		return 0
	}
	return 8*over(0, edge)/float64(edge) + 2*over(edge, ledger.HashSpace)/float64(ledger.HashSpace-edge)
}

func loadConfig(t *testing.T, id string, counts map[string]int32, logger hclog.Logger) coord.Config {
	cfg := testConfig(t, id, counts)
	cfg.LoadReportInterval = 200 * time.Millisecond
	cfg.LoadCooldown = time.Second
	if logger != nil {
		cfg.Logger = logger
	}
	return cfg
}

func rangeLoadOf(r schema.RangeState) assign.RangeLoad {
	lo, hi := r.Record.Lo, r.Record.Hi
	rl := assign.RangeLoad{Topic: r.Record.Topic, Partition: r.Record.Partition, Lo: lo, Hi: hi, BusyPerSec: hotFront(lo, hi)}
	rl.RecordsPerSec = 100 * rl.BusyPerSec
	if n := uint64(assign.LoadBuckets); hi-lo >= n {
		w := (hi - lo) / n
		for i := range n {
			b := lo + (i+1)*w
			if i == n-1 {
				b = hi
			}
			rl.Buckets = append(rl.Buckets, hotFront(lo+i*w, b))
		}
	}
	return rl
}

func totalLoadMoves(ss []*coord.Session) coord.LoadMoves {
	var m coord.LoadMoves
	for _, s := range ss {
		x := s.LoadMoves()
		m.Moves += x.Moves
		m.HashSpaceMoved += x.HashSpaceMoved
		m.IgnoredReports += x.IgnoredReports
	}
	return m
}

// TestLoadMovesSplitPoints: four members share one partition whose first
// eighth carries 80 % of the load. Each reports its ranges' load through
// Session.ReportLoad; the leader moves the split points through the
// two-phase handoff (no member gains a hash another holds unreleased), the
// busiest member's true load drops to near a quarter, the partition settles
// with one range per owner, and identical reports after that move nothing
// again.
func TestLoadMovesSplitPoints(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	var (
		allMu sync.Mutex
		all   []event
	)
	var sessions []*coord.Session
	ids := []string{"a", "b", "c", "d"}
	for _, id := range ids {
		s, _ := join(t, e.Endpoints, loadConfig(t, id, counts, nil))
		o := &flushingOwner{s: s}
		done := make(chan struct{})
		go func() { defer close(done); o.run(t, &all, &allMu) }()
		t.Cleanup(func() { _ = s.Close(); <-done })
		sessions = append(sessions, s)
	}
	onePerOwnerIn := func(snap *schema.Snapshot) bool {
		if !settled(snap) {
			return false
		}
		owners := map[string]bool{}
		for _, r := range snap.Ranges {
			owners[r.Record.Owner] = true
		}
		return len(snap.Ranges) == len(owners) && len(owners) == len(ids)
	}
	onePerOwner := func() bool { return onePerOwnerIn(snapshot(t, cli)) }
	waitFor(t, "four members share the partition by width", 60*time.Second, onePerOwner)
	busiest := func(snap *schema.Snapshot) float64 {
		load := map[string]float64{}
		for _, r := range snap.Ranges {
			load[r.Record.Owner] += hotFront(r.Record.Lo, r.Record.Hi)
		}
		var m float64
		for _, v := range load {
			m = max(m, v)
		}
		return m
	}
	if b := busiest(snapshot(t, cli)); b < 6 {
		t.Fatalf("busiest member carries %.2f by width: want the skew to show", b)
	}

	// Each member reports what it owns, as its meter would.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	report := func(s *coord.Session) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-s.Ctx().Done():
					return
				case <-time.After(150 * time.Millisecond):
				}
				snap, err := coord.ReadSnapshot(s.Ctx(), cli, schema.Group{Name: "g"})
				if err != nil {
					continue
				}
				r := schema.LoadReport{At: time.Now(), Window: 0.15}
				for _, rs := range snap.Owned(s.ID()) {
					if rs.Record.State == schema.StateActive {
						r.Ranges = append(r.Ranges, rangeLoadOf(rs))
					}
				}
				if err := s.ReportLoad(s.Ctx(), r, nil); err != nil && s.Ctx().Err() == nil {
					t.Logf("report load of %s: %v (the next report replaces it)", s.ID(), err)
				}
			}
		}()
	}
	for _, s := range sessions {
		report(s)
	}
	defer func() { close(stop); wg.Wait() }()

	width := map[string]int64{}
	for _, r := range snapshot(t, cli).Ranges {
		width[r.Key] = r.Rev
	}
	// Judged on one snapshot, taken after the move was counted: a second
	// read could catch the move's revokes under way.
	var snap *schema.Snapshot
	waitFor(t, "the leader moves split points by load and the partition settles", 60*time.Second, func() bool {
		if totalLoadMoves(sessions).Moves == 0 {
			return false
		}
		snap = snapshot(t, cli)
		if !onePerOwnerIn(snap) {
			return false
		}
		for _, r := range snap.Ranges {
			if width[r.Key] != r.Rev {
				return true // not the width layout any more
			}
		}
		return false
	})
	checkCoverage(t, snap, counts)
	if b := busiest(snap); b > 1.3*2.5 {
		t.Fatalf("busiest member carries %.2f after the load move: want within 30 %% of 2.5", b)
	}
	moves := totalLoadMoves(sessions)
	if moves.HashSpaceMoved <= 0 || moves.HashSpaceMoved > 1 {
		t.Fatalf("hash space moved %v: want in (0, 1]", moves.HashSpaceMoved)
	}
	// The same load, reported again and again, moves nothing: at least
	// three cooldowns of reports.
	revs := map[string]int64{}
	for _, r := range snap.Ranges {
		revs[r.Key] = r.Rev
	}
	time.Sleep(4 * time.Second)
	if again := totalLoadMoves(sessions); again.Moves != moves.Moves {
		t.Fatalf("%d load moves after the first %d on the same load: thrash", again.Moves-moves.Moves, moves.Moves)
	}
	for _, r := range snapshot(t, cli).Ranges {
		if revs[r.Key] != r.Rev {
			t.Fatalf("range %s rewritten after the group settled on the same load", r.Key)
		}
	}

	// A fifth member joins: the change is placed by load (not by width,
	// which would put the skew back on one member), then tidied into one
	// range per owner once the group is still.
	s, _ := join(t, e.Endpoints, loadConfig(t, "e", counts, nil))
	o := &flushingOwner{s: s}
	done := make(chan struct{})
	go func() { defer close(done); o.run(t, &all, &allMu) }()
	t.Cleanup(func() { _ = s.Close(); <-done })
	sessions = append(sessions, s)
	ids = append(ids, "e")
	report(s)
	waitFor(t, "e joins, placed by load, and the partition settles with one range per owner", 60*time.Second, onePerOwner)
	snap = snapshot(t, cli)
	checkCoverage(t, snap, counts)
	if b := busiest(snap); b > 1.3*2 {
		t.Fatalf("busiest member carries %.2f after e joined: want within 30 %% of 2", b)
	}

	allMu.Lock()
	defer allMu.Unlock()
	checkHandoffOrder(t, all)
}

// TestBadLoadReportsMoveNothing: reports that are malformed (NaN, written
// raw), absurd (negative) or from a member id that is not registered move
// no range, and each is warned about once, however many rounds see it.
func TestBadLoadReportsMoveNothing(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	counts := map[string]int32{"t": 1}
	logs := &testutil.Buffer{}
	logger := hclog.New(&hclog.LoggerOptions{Output: io.MultiWriter(logs, testLogWriter{t}), Level: hclog.Info})
	var sessions []*coord.Session
	for _, id := range []string{"a", "b"} {
		s, _ := join(t, e.Endpoints, loadConfig(t, id, counts, logger))
		sessions = append(sessions, s)
	}
	waitFor(t, "two members share the partition", 60*time.Second, func() bool {
		snap := snapshot(t, cli)
		return settled(snap) && len(snap.Ranges) == 2 && snap.Ranges[0].Record.Owner != snap.Ranges[1].Record.Owner
	})
	snap := snapshot(t, cli)
	a, b := snap.Ranges[0], snap.Ranges[1]
	// Skewed enough to move if it were believed: all of a's range busy.
	raw := func(member string, r schema.RangeState, busy string) string {
		return `{"v":1,"member":"` + member + `","at":"2026-01-01T00:00:00Z","window":5,"ranges":[{"topic":"t","partition":0,"lo":` +
			strconv.FormatUint(r.Record.Lo, 10) + `,"hi":` + strconv.FormatUint(r.Record.Hi, 10) + `,"records_per_sec":1000,"busy_per_sec":` + busy + `,"backlog":0}]}`
	}
	puts := map[string]string{
		"/keyshare/g/load/" + a.Record.Owner: raw(a.Record.Owner, a, "NaN"),
		"/keyshare/g/load/" + b.Record.Owner: raw(b.Record.Owner, b, "-5"),
		"/keyshare/g/load/ghost":             raw("ghost", a, "50"),
	}
	// Written again and again, as members report every interval.
	for round := range 5 {
		for k, v := range puts {
			if _, err := cli.Put(t.Context(), k, v); err != nil {
				t.Fatal(err)
			}
		}
		if round == 0 {
			waitFor(t, "the leader warns about the three reports", 30*time.Second, func() bool {
				return totalLoadMoves(sessions).IgnoredReports >= 3
			})
		}
		time.Sleep(time.Second) // a cooldown, several load timers
	}
	if m := totalLoadMoves(sessions); m.Moves != 0 || m.IgnoredReports != 3 {
		t.Fatalf("load moves %d, reports warned about %d: want 0 and 3 (once each)", m.Moves, m.IgnoredReports)
	}
	for _, who := range []string{a.Record.Owner, b.Record.Owner, "ghost"} {
		if n := strings.Count(logs.String(), "reporter="+who+" "); n != 1 {
			t.Errorf("%d warnings about %s's report: want 1\n%s", n, who, logs.String())
		}
	}
	after := snapshot(t, cli)
	if len(after.Ranges) != 2 {
		t.Fatalf("%d ranges after bad reports: want the 2 there were", len(after.Ranges))
	}
	for i, r := range after.Ranges {
		if r.Key != snap.Ranges[i].Key || r.Rev != snap.Ranges[i].Rev {
			t.Fatalf("range %s changed (rev %d → %d) on bad load reports", r.Key, snap.Ranges[i].Rev, r.Rev)
		}
	}
}
