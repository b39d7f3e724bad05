package coord

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// Handoff plans: a leave in one write per range.
//
// A leaving member drains and releases its ranges unasked (Session.Leave).
// Released, each range waited for the leader to see the release and write
// it again, active for its next owner: two writes per range, the second a
// round behind the first. At P = 4,096 that second round was half of a
// leave's etcd work and a third of its time.
//
// Instead, when the leader sees a member leaving, it writes one key,
// handoffs/<id>, under the leaver's lease: for each range of the leaver
// that moves whole to one member, that member. The leaver then writes each
// drained range active for its next owner itself, in the transaction that
// would have released it, guarded as a release is (its session, the
// record's revision) and also by the plan being the one it read. A range
// the plan does not name, or whose guard fails, is released as before and
// the leader hands it on. The leader keeps its say: it makes the plan from
// the assignment it wants, and rewrites the plan when that changes.

// handoffWait is how long a leaving member's first release waits for the
// leader's plan (a leader from before plans writes none).
const handoffWait = 500 * time.Millisecond

// followHandoff keeps the plan the leader writes for this leaving member
// in s.mu.handoff, until the session ends.
func (s *Session) followHandoff() {
	key := s.schema.Handoff(s.ID())
	set := func(data []byte, rev int64) {
		h := storedHandoff{}
		if rev > 0 {
			var err error
			if h, err = schema.DecodeHandoff(key, data, rev); err != nil {
				s.log.Warn("handoff plan unreadable; releasing ranges to the leader instead", "error", err)
			}
		}
		s.mu.Lock()
		s.mu.handoff = h
		if len(h.ByKey) > 0 && !s.mu.handoffSeen {
			s.mu.handoffSeen = true
			close(s.handoffReady)
		}
		s.mu.Unlock()
	}
	load := func(ctx context.Context) (int64, error) {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		if len(resp.Kvs) == 1 {
			set(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
		} else {
			set(nil, 0)
		}
		return resp.Header.Revision, nil
	}
	follow := func(ctx context.Context, rev int64) error {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		defer cancel()
		for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
			if err := watchErr(wr, true); err != nil {
				return err
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					set(nil, 0)
				} else {
					set(ev.Kv.Value, ev.Kv.ModRevision)
				}
			}
		}
		return errors.New("watch channel closed")
	}
	readAndWatch(s.ctx, s.log, "the handoff plan", load, follow)
}

// handoffPlan is the leader's plan for this member's ranges: none unless
// it is leaving. Until handoffWait after the leaving write it waits for
// the first plan.
func (s *Session) handoffPlan(ctx context.Context) storedHandoff {
	s.mu.Lock()
	at, h, seen := s.mu.leavingAt, s.mu.handoff, s.mu.handoffSeen
	s.mu.Unlock()
	if at.IsZero() || seen {
		return h
	}
	wait := time.NewTimer(handoffWait - time.Since(at))
	defer wait.Stop()
	select {
	case <-s.handoffReady:
	case <-wait.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.handoff
}

// handOff writes each range of rels that plan h names active for its next
// owner, with its final ledger entry, guarded as a release is and by the
// plan (see the top of this file). It returns the ranges handed off and
// the rest, to be released to the leader: those h does not name and those
// whose guard failed. err is an error other than a guard failing.
func (s *Session) handOff(ctx context.Context, h storedHandoff, rels []RangeRelease) (handed, rest []RangeRelease, err error) {
	now := time.Now().UTC()
	var writes []write
	var direct []RangeRelease
	for _, rl := range rels {
		p, ok := h.ByKey[rl.Range.Key]
		if !ok || p.Rev != rl.Range.Rev {
			rest = append(rest, rl)
			continue
		}
		// The view shows a leaving member's ranges as revoking; the record
		// in etcd is active, and only who owns it changes.
		rec := rl.Range.Record
		rec.Owner, rec.State, rec.Target, rec.DrainMs, rec.Gen, rec.Since = p.To, schema.StateActive, "", 0, h.Plan.Gen, now
		writes = append(writes, s.releaseWrite(rl, rec))
		direct = append(direct, rl)
	}
	if len(writes) == 0 {
		return nil, rest, nil
	}
	// No compare of the next owners' registrations: with 200 members they
	// alone would fill a transaction. The leader rewrites the plan when a
	// member it names goes, which fails the plan's compare; a range handed
	// to a member that went in between is failed over with the final state
	// written here, so nothing runs twice.
	common := append(s.common(), clientv3.Compare(clientv3.ModRevision(s.schema.Handoff(s.ID())), "=", h.Rev))
	err = s.rec.record(ctx, common, writes)
	var fenced *FencedError
	if err != nil && !errors.As(err, &fenced) {
		return nil, nil, err
	}
	failed := make(map[string]bool)
	if fenced != nil {
		// The plan was rewritten (a member it names went, or the wanted
		// assignment changed), or the range moved: release what is
		// still this member's to release.
		for _, k := range fenced.Keys {
			failed[k] = true
		}
	}
	for _, rl := range direct {
		if failed[rl.Range.Key] {
			rest = append(rest, rl)
		} else {
			handed = append(handed, rl)
		}
	}
	return handed, rest, nil
}
