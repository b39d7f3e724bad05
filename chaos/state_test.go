package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keyshare/keyshare/testutil"
)

// Keyed-state rows. The members run the real `keyshare member --deliver URL
// --state` against cmd/keyshare/testdata/state_endpoint.py (a Python
// process that counts each key's records from the state the member sends
// alone, and answers the new count as the key's state). Records flow
// before and during the row's fault; afterwards the changelog
// <group>-<topic>-state is read as a restore reads it (state_check_test.go)
// and each key's count must be exactly its number of acknowledged records:
// no change lost when a range moves (restore), none applied twice when a
// record runs again (skip rule), none of a zombie's late writes winning
// (fencing).

// stateRow is one line of the keyed-state matrix.
type stateRow struct {
	name string
	// short rows also run in `make test`.
	short bool
	// members started before the records flow.
	members int
	// memberArgs are flags every member of the row gets; hotShare is the
	// share of the produced records that has one key (0: none).
	memberArgs []string
	hotShare   float64
	// disk: each member keeps its state on disk (--state-dir), in a
	// directory of its own under the row's.
	disk  bool
	fault func(s *stateEnv)
	// check runs after the counts are checked.
	check func(t *testing.T, s *stateEnv)
}

// stateRows are the keyed-state matrix's rows.
var stateRows = []stateRow{
	{name: "S1 SIGKILL a member (ledger flushed every 5 s)", short: true, members: 3,
		// A long flush interval: most of what the killed member applied
		// is not in its ledger, so its successor runs it again and the
		// skip rule must leave it.
		memberArgs: []string{"--flush-interval", "5s"},
		fault: func(s *stateEnv) {
			s.e.stop(s.e.members()[0], syscall.SIGKILL)
			s.e.fault()
			s.markLogs()
			time.Sleep(time.Second)
			// The survivors or the replacement take the killed
			// member's ranges, as the leader sees them first.
			s.mustRestore = append(s.e.members(), s.start())
		}, check: checkRestored},
	{name: "S2 graceful leave (SIGINT)", short: true, members: 3, fault: func(s *stateEnv) {
		s.e.stop(s.e.members()[0], syscall.SIGINT)
		s.e.fault()
		s.markLogs()
		s.mustRestore = s.e.members()
	}, check: checkRestored},
	{name: "S3 scale-out (a member added mid-run)", short: true, members: 2, fault: func(s *stateEnv) {
		s.e.fault()
		s.markLogs()
		s.mustRestore = []string{s.start()}
	}, check: checkRestored},
	{name: "S4 zombie member (SIGSTOP 2.5×TTL, then SIGCONT)", short: true, members: 3,
		memberArgs: []string{"--flush-interval", "5s"},
		fault: func(s *stateEnv) {
			pause(s.e, nonLeader(s.e))
		}, check: func(t *testing.T, s *stateEnv) { checkZombie(t, s.e) }},
	{name: "S5 whole group killed, then started again", short: true, members: 3, fault: func(s *stateEnv) {
		ids := s.e.members()
		for _, id := range ids {
			s.e.stop(id, syscall.SIGKILL)
		}
		s.e.fault()
		s.markLogs()
		for range ids {
			// New ids: the killed members' registrations live until
			// their leases end.
			s.mustRestore = append(s.mustRestore, s.start())
		}
	}, check: checkRestored},
	// Long form only: S5 already ends every session in the short form.
	{name: "S6 etcd down 5 s (> TTL)", members: 3, fault: func(s *stateEnv) {
		// Every member's session ends: the ranges are granted again under
		// new tokens, and restored.
		s.markLogs()
		s.mustRestore = s.e.members()
		s.e.restartEtcd(5*time.Second, false)
	}, check: checkRestored},
	{name: "S7 load-driven moves (one key 40% of records)", short: true, members: 3, hotShare: 0.4,
		// Row 17's settings: split points move by load within seconds.
		memberArgs: []string{"--balance", "load", "--load-report-interval", "500ms", "--load-cooldown", "2s", "--load-min-busy", "0"},
		fault: func(s *stateEnv) {
			s.markLogs()
			s.mustRestore = s.e.members()
			testutil.WaitFor(s.e.t, "a load-driven move (\""+loadMoveLog+"\" in a member's log)", 20*time.Second, func() bool { return loadMoved(s.e) })
			s.e.fault()
		}, check: checkRestored},
	{name: "S8 state on disk: scale-out, then SIGKILL a member", short: true, members: 2, disk: true,
		memberArgs: []string{"--flush-interval", "5s"},
		fault: func(s *stateEnv) {
			// The two members split their ranges for the third and
			// restore the parts they keep from their copies; the
			// killed member's ranges then restore from the changelog.
			s.markLogs()
			s.mustRestore = []string{s.start()}
			s.e.fault()
			testutil.WaitFor(s.e.t, "a member restoring a part of its split range from its copy (\"from_copy=true\" in its log)", 30*time.Second, s.restoredFromCopy)
			time.Sleep(2 * time.Second) // records it runs and has not flushed, for its successor to find applied
			s.e.stop(s.e.members()[0], syscall.SIGKILL)
			time.Sleep(time.Second)
			s.mustRestore = append(s.mustRestore, s.e.members()...)
		}, check: checkRestored},
}

// stateEnv is a keyed-state row's world: the matrix's env (etcd, a
// broker, the producer, the commit observer) with the counting endpoint
// and members that run keyshare member.
type stateEnv struct {
	e   *env
	bin string // the keyshare binary the members run
	url string // the endpoint's
	// answers is the endpoint's log: a line per record it answered.
	answers string
	row     stateRow

	// checkRestored wants a restore that took some key's state, after
	// the fault, by one of mustRestore.
	mustRestore []string
	logMarks    map[string]int64 // member id → its log's size at the fault
}

// buildKeyshare builds cmd/keyshare into dir with the go build flags
// given (none: the release build).
func buildKeyshare(t *testing.T, dir string, flags ...string) string {
	bin := filepath.Join(dir, "keyshare")
	if err := goBuild(bin, flags...); err != nil {
		t.Fatal(err)
	}
	return bin
}

func goBuild(out string, flags ...string) error {
	args := append(append([]string{"build", "-o", out}, flags...), "../cmd/keyshare")
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// startCountingEndpoint starts cmd/keyshare's counting endpoint on a free
// port, logging its answers to log, and returns its URL; it is killed
// when t ends.
func startCountingEndpoint(t *testing.T, log string) string {
	cmd := exec.Command("python3", "../cmd/keyshare/testdata/state_endpoint.py", "--port", "0",
		"--log", log, "--delay", "0.002")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 ../cmd/keyshare/testdata/state_endpoint.py (the keyed-state rows need python3): %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		t.Fatalf("state_endpoint.py did not start (%v): %q", err, line)
	}
	return "http://127.0.0.1:" + port + "/"
}

// start launches a new member process of keyshare member with --state
// and returns its id. It is one of the env's members: e.stop, e.signal
// and the matrix's fault helpers that do not start members work on it.
func (s *stateEnv) start() string {
	e := s.e
	e.mu.Lock()
	e.next++
	id := fmt.Sprintf("m%d", e.next)
	e.mu.Unlock()
	args := []string{"member", "--brokers", e.brokers, "--etcd", e.memberEtcd, "--group", group, "--topic", topic, "--id", id,
		"--deliver", s.url, "--state", "--ttl", ttl.String(), "--drain-timeout", "10s", "--log-level", "info",
		"--metrics-addr", e.newMetricsAddr(id)}
	if s.row.disk {
		args = append(args, "--state-dir", filepath.Join(e.dir, id+"-state"))
	}
	args = append(args, s.row.memberArgs...)
	cmd := exec.Command(s.bin, args...)
	cmd.Env = withoutKeyshareEnv(os.Environ())
	logf, err := os.OpenFile(filepath.Join(e.dir, id+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.procs[id] = cmd
	e.runs = append(e.runs, memberRun{id: id, from: time.Now()})
	e.mu.Unlock()
	return id
}

// waitDelivering waits until the endpoint has answered records of every
// running member: each holds state in its ranges, so that a fault moves
// state wherever it moves a range (a member slow to start, as on Apache
// Kafka, may have applied nothing yet).
func (s *stateEnv) waitDelivering() {
	testutil.WaitFor(s.e.t, "records answered for every member", 30*time.Second, func() bool {
		b, err := os.ReadFile(s.answers)
		if err != nil {
			return false
		}
		answered := map[string]int{}
		for line := range strings.Lines(string(b)) {
			var a struct{ Member string }
			if json.Unmarshal([]byte(line), &a) == nil {
				answered[a.Member]++
			}
		}
		for _, id := range s.e.members() {
			if answered[id] < 10 {
				return false
			}
		}
		return true
	})
}

// withoutKeyshareEnv drops the KEYSHARE_ variables the tests read
// (KEYSHARE_KAFKA and the like), which keyshare member would take for its
// flags' values.
func withoutKeyshareEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "KEYSHARE_") {
			out = append(out, kv)
		}
	}
	return out
}

// stateResult is what a keyed-state row's run found.
type stateResult struct {
	Acked  int
	Counts countCheck
	env    *stateEnv
}

// runStateRow runs r with the members on bin: the row's members, records
// at 400 a second for 6 s with the fault 1.5 s in, every record committed,
// the members stopped, then the changelog's counts read.
func runStateRow(t *testing.T, r stateRow, bin string) stateResult {
	e := newEnv(t, 2, 1, 1)
	e.hotShare = r.hotShare
	s := &stateEnv{e: e, bin: bin, row: r, answers: filepath.Join(e.dir, "answers.jsonl")}
	s.url = startCountingEndpoint(t, s.answers)
	t.Cleanup(func() {
		if t.Failed() {
			e.dumpLogs()
		}
	})
	for range r.members {
		s.start()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obsDone := make(chan struct{})
	go func() { defer close(obsDone); e.observeCommits(ctx) }()

	const rate, secs, keys = 400.0, 6, 200
	prodErr := make(chan error, 1)
	go func() { prodErr <- e.produce(ctx, int(rate)*secs, keys, rate) }()
	time.Sleep(time.Duration(secs) * time.Second / 4)
	s.waitDelivering()
	r.fault(s)
	if err := <-prodErr; err != nil {
		t.Fatalf("producer: %v", err)
	}
	testutil.WaitFor(t, "every record committed", 120*time.Second, e.committedAtEnd)
	for _, id := range e.members() {
		e.stop(id, syscall.SIGTERM)
	}
	cancel()
	<-obsDone

	e.mu.Lock()
	res := stateResult{Acked: len(e.acked), env: s}
	e.mu.Unlock()
	res.Counts = s.checkCounts()
	return res
}

// TestStateMatrix runs each keyed-state row: members with --state against
// the counting endpoint, records before and during a fault, then every
// key's count in the changelog checked equal to its records.
// KEYSHARE_CHAOS=long runs the rows that are not short too.
func TestStateMatrix(t *testing.T) {
	long := os.Getenv("KEYSHARE_CHAOS") == "long"
	bin := buildKeyshare(t, t.TempDir())
	for _, r := range stateRows {
		if !long && !r.short {
			continue
		}
		t.Run(r.name, func(t *testing.T) {
			res := runStateRow(t, r, bin)
			t.Logf("%d records acknowledged; %s", res.Acked, res.Counts)
			if res.Counts.wrong() {
				t.Errorf("keyed state broken: %s\n%s", res.Counts, strings.Join(res.Counts.Samples, "\n"))
			}
			if r.check != nil {
				r.check(t, res.env)
			}
		})
	}
}
