package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// auditLine is one line of a member's --audit log: a write etcd accepted.
type auditLine struct {
	Member string   `json:"member"`
	Rev    int64    `json:"rev"`
	Puts   []string `json:"puts"`
}

// staleWrites replays the group's whole etcd history and checks every write
// the members' audit logs say etcd accepted against the state just before
// it (revision rev-1):
//
//   - a leader's write (it carries the generation key: assignments, repairs)
//     and a commit record must come from the member whose election key was
//     the oldest, that is, the leader;
//   - an owner's write (ledger entry, release, loss or stuck report) must
//     come from the member the range record named as owner, while the range
//     was active or revoking and the member was registered.
//
// It returns the writes that broke a rule, described.
func (e *env) staleWrites(ctx context.Context) []string {
	var audits []auditLine
	files, _ := filepath.Glob(filepath.Join(e.dir, "*.audit"))
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			e.t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l auditLine
			if err := json.Unmarshal(sc.Bytes(), &l); err == nil {
				audits = append(audits, l)
			}
		}
		fh.Close()
	}
	if len(files) == 0 || len(audits) == 0 {
		e.t.Errorf("no audit log lines: the fencing check has nothing to check")
		return nil
	}
	slices.SortFunc(audits, func(a, b auditLine) int { return int(a.Rev - b.Rev) })

	s := schema.Group{Prefix: "/keyshare", Name: group}.Keys()
	history := e.history(ctx, s.Root())
	current := map[string]*mvccpb.KeyValue{}
	leader := func() string {
		var best *mvccpb.KeyValue
		for k, kv := range current {
			if strings.HasPrefix(k, s.Election()+"/") && (best == nil || kv.CreateRevision < best.CreateRevision) {
				best = kv
			}
		}
		if best == nil {
			return ""
		}
		return string(best.Value)
	}
	owns := func(member, rangeKey string) string {
		kv := current[rangeKey]
		if kv == nil {
			return "the range record does not exist"
		}
		rec, err := schema.DecodeRange(schema.Group{Name: group}, rangeKey, kv.Value, kv.ModRevision)
		if err != nil {
			return "the range record is damaged"
		}
		if rec.Owner != member || (rec.State != schema.StateActive && rec.State != schema.StateRevoking) {
			return fmt.Sprintf("the range is %s by %s", rec.State, rec.Owner)
		}
		if current[s.Member(member)] == nil {
			return "the member is not registered"
		}
		return ""
	}
	var bad []string
	next := 0
	// checkUpTo checks the audited writes at revisions up to rev: those at
	// rev against the current state (the state just before rev), those
	// below it are missing from etcd's history.
	checkUpTo := func(rev int64) {
		for ; next < len(audits) && audits[next].Rev <= rev; next++ {
			a := audits[next]
			if a.Rev != rev {
				bad = append(bad, fmt.Sprintf("%s: audited write at revision %d is not in etcd's history", a.Member, a.Rev))
				continue
			}
			leaderWrite := slices.Contains(a.Puts, s.Generation())
			for _, k := range a.Puts {
				var why string
				switch {
				case leaderWrite, strings.HasPrefix(k, s.Commits()):
					if l := leader(); l != a.Member {
						why = fmt.Sprintf("a leader's write, but the leader was %q", l)
					}
				case strings.HasPrefix(k, s.Ledger()):
					why = owns(a.Member, s.Ranges()+strings.TrimPrefix(k, s.Ledger()))
				case strings.HasPrefix(k, s.Ranges()):
					why = owns(a.Member, k) // a release
				case strings.HasPrefix(k, s.Lost()):
					why = owns(a.Member, s.Ranges()+strings.TrimPrefix(k[:strings.LastIndexByte(k, '/')], s.Lost()))
				case strings.HasPrefix(k, s.Stuck()):
					why = owns(a.Member, s.Ranges()+strings.TrimPrefix(k, s.Stuck()))
				}
				if why != "" {
					bad = append(bad, fmt.Sprintf("%s wrote %s at revision %d: %s", a.Member, k, a.Rev, why))
				}
			}
		}
	}
	for i := 0; i < len(history); {
		rev := history[i].Kv.ModRevision
		checkUpTo(rev)
		// Apply every event of this revision.
		for ; i < len(history) && history[i].Kv.ModRevision == rev; i++ {
			ev := history[i]
			if ev.Type == clientv3.EventTypeDelete {
				delete(current, string(ev.Kv.Key))
			} else {
				current[string(ev.Kv.Key)] = ev.Kv
			}
		}
	}
	checkUpTo(math.MaxInt64) // audited writes past the history's end
	e.t.Logf("fencing: %d accepted writes checked against %d etcd events", len(audits), len(history))
	return bad
}

// history returns every event under prefix since etcd started, in order.
// It writes a marker key under prefix and reads the watch up to it.
func (e *env) history(ctx context.Context, prefix string) []*clientv3.Event {
	marker := prefix + "~history-end"
	end, err := e.cli.Put(ctx, marker, "")
	if err != nil {
		e.t.Fatalf("write the history marker: %v", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []*clientv3.Event
	for resp := range e.cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(1)) {
		if err := resp.Err(); err != nil {
			e.t.Fatalf("replay etcd's history: %v", err)
		}
		for _, ev := range resp.Events {
			if string(ev.Kv.Key) == marker {
				if ev.Kv.ModRevision >= end.Header.Revision {
					return out
				}
				continue
			}
			out = append(out, ev)
		}
	}
	e.t.Fatalf("the history watch ended before revision %d", end.Header.Revision)
	return nil
}
