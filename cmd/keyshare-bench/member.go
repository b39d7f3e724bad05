package main

// keyshare-bench member: keyshare member (cmd/internal/membercmd) with the
// lab's additions for tests and benchmarks. Without --deliver its handler
// is simulated: work per record or per call (--work), failures
// (--fail-rate), a stuck key (--stall) and a log of the records handled
// (--record, package recordlog); --audit logs every etcd write etcd
// accepted, with either handler. The fault matrix (chaos/), the demo's
// tests and the process scenarios of this benchmark run it.

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"google.golang.org/grpc"

	"github.com/keyshare/keyshare/cmd/internal/cli"
	"github.com/keyshare/keyshare/cmd/internal/membercmd"
	"github.com/keyshare/keyshare/cmd/internal/recordlog"
)

// memberCommand is the name of the member subcommand.
const memberCommand = "member"

// simulation is the lab of keyshare-bench member (membercmd.Lab).
type simulation struct {
	work, record, stall, audit string
	failRate                   float64
}

func (s *simulation) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.work, "work", "0", "without --deliver: simulated work per record: a duration (5ms), uniform:MIN-MAX (uniform:0-5ms) or exp:MEAN (exp:2ms); or per handler call: call:FIXED+PER_RECORD (call:5ms+0.05ms)")
	fs.Float64Var(&s.failRate, "fail-rate", 0, "without --deliver: probability that an attempt fails (0-1)")
	fs.StringVar(&s.stall, "stall", "", "without --deliver: simulate a stuck key: KEY:DURATION makes the first record of KEY take DURATION")
	fs.StringVar(&s.record, "record", "", "without --deliver: append one JSON line per handled record to this file (written before the record counts as done)")
	fs.StringVar(&s.audit, "audit", "", "append one JSON line per etcd write etcd accepted (keys and revision) to this file")
}

func (s *simulation) Check(delivering bool) error {
	if _, err := parseCost(s.work); err != nil {
		return err
	}
	if _, _, err := parseStall(s.stall); err != nil {
		return err
	}
	if s.failRate < 0 || s.failRate > 1 {
		return fmt.Errorf("--fail-rate %g: want a probability between 0 and 1", s.failRate)
	}
	if !delivering {
		return nil
	}
	for flag, set := range map[string]bool{"--work": s.work != "0", "--fail-rate": s.failRate != 0, "--stall": s.stall != "", "--record": s.record != ""} {
		if set {
			return fmt.Errorf("%s simulates a handler; --deliver replaces it: drop %s", flag, flag)
		}
	}
	return nil
}

func (s *simulation) Start(memberID string, delivering bool) (membercmd.LabRun, error) {
	var closers []func()
	run := membercmd.LabRun{Close: func() {
		for _, c := range closers {
			c()
		}
	}}
	if s.audit != "" {
		audit, err := openAuditLog(s.audit, memberID) // audit.go
		if err != nil {
			return run, err
		}
		closers = append(closers, func() { _ = audit.close() })
		run.DialOptions = []grpc.DialOption{grpc.WithChainUnaryInterceptor(audit.interceptor())}
	}
	if delivering {
		return run, nil
	}
	var rec *recordlog.Log
	if s.record != "" {
		var err error
		if rec, err = recordlog.Open("--record", s.record); err != nil {
			run.Close()
			return run, err
		}
		closers = append(closers, func() { _ = rec.Close() })
	}
	cost, _ := parseCost(s.work)                 // checked by Check
	stallKey, stallFor, _ := parseStall(s.stall) // checked by Check
	h := &simulatedHandler{member: memberID, cost: cost, failRate: s.failRate, stallKey: stallKey, stallFor: stallFor, rec: rec,
		rng: rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(time.Now().UnixNano())))}
	run.Handler, run.BatchHandler = h.handle, h.handleBatch // member_work.go
	return run, nil
}

// memberHelp is what keyshare-bench member -h prints above its flags.
var memberHelp = cli.CommandHelp{
	Description: `Runs one keyshare member, as keyshare member does with the same flags, for tests and benchmarks: without --deliver its handler is simulated (--work, --fail-rate, --stall), optionally recording each record it handles (--record); --audit logs the etcd writes etcd accepted. Operators run keyshare member, which always delivers (--deliver).`,
	Example: `keyshare-bench member --brokers localhost:9092 --etcd localhost:2379 --group bench --topic orders --work uniform:0-2ms --record m1.jsonl
keyshare-bench member --group bench --topic orders --batch-size 50 --work call:5ms+0.05ms --fail-rate 0.01`,
}
