package coord

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// resignTimeout bounds the delete of an election key. A key that cannot be
// deleted in time goes with the member's lease.
const resignTimeout = 2 * time.Second

// election is the member's candidacy for the group's leadership, the
// protocol of etcd's concurrency.Election: a key under the election prefix,
// named by the member's lease and held by it; the key created first leads,
// and every other candidate waits for the keys created before its own to
// go.
//
// keyshare runs it itself because Election.Campaign, when its context ends
// while it waits, deletes its key under the client's context, which has no
// deadline: with etcd unreachable it waits until etcd is back, and a
// member's Close (and so its shutdown) with it. Here every request ends
// with the caller's context or within resignTimeout.
type election struct {
	cli    *clientv3.Client
	prefix string // the election prefix, ending in "/"
	lease  clientv3.LeaseID
	// life is the session's context: once it ends, the key needs no
	// delete (the lease is revoked or expires, and takes the key).
	life context.Context
	key  string // this member's key, once campaign has put it
	rev  int64  // key's create revision
	log  hclog.Logger
}

func (s *Session) newElection() *election {
	return &election{cli: s.cli, prefix: s.schema.Election() + "/", lease: s.es.Lease(), life: s.ctx, log: s.log}
}

// Key is the member's election key; Rev is its create revision, which
// guards the leader's writes.
func (e *election) Key() string { return e.key }
func (e *election) Rev() int64  { return e.rev }

// Campaign puts the member's key (or finds it from an earlier attempt) and
// returns once every key created before it is gone: the member leads. When
// ctx ends first (the member leaves) it deletes the key again, within
// resignTimeout and while the session lasts, so that the candidates behind
// it do not wait for the lease; on another error it keeps the key for the
// next attempt.
func (e *election) Campaign(ctx context.Context, val string) error {
	k := fmt.Sprintf("%s%x", e.prefix, e.lease)
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, val, clientv3.WithLease(e.lease))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return err
	}
	e.key, e.rev = k, resp.Header.Revision
	if !resp.Succeeded {
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		e.rev = kv.CreateRevision
	}
	if err := e.waitDeletes(ctx, e.rev-1); err != nil {
		if ctx.Err() != nil {
			_ = e.Resign(e.life)
		}
		return err
	}
	return nil
}

// Resign deletes the member's key if it is still the one campaign put,
// waiting at most resignTimeout (and not past ctx).
func (e *election) Resign(ctx context.Context) error {
	if e.key == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, resignTimeout)
	defer cancel()
	_, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", e.rev)).
		Then(clientv3.OpDelete(e.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("coord: delete election key %s: %w", e.key, err)
	}
	e.key, e.rev = "", 0
	return nil
}

// waitDeletes returns once no key under the prefix has a create revision
// up to maxRev: it waits for the newest such key to be deleted, then looks
// again.
//
// A key without a lease is no candidate's (every campaign puts its key
// under its session's lease) and would never go: written by hand or by a
// tool, it would keep the group without a leader, silently. It is deleted,
// guarded by its being the same lease-less key, with a warning.
func (e *election) waitDeletes(ctx context.Context, maxRev int64) error {
	opts := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(maxRev))
	for {
		resp, err := e.cli.Get(ctx, e.prefix, opts...)
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		kv := resp.Kvs[0]
		if kv.Lease == 0 {
			if err := e.deleteLeaseless(ctx, string(kv.Key), kv.CreateRevision); err != nil {
				return err
			}
			continue
		}
		if err := waitDelete(ctx, e.cli, string(kv.Key), resp.Header.Revision); err != nil {
			return err
		}
	}
}

// deleteLeaseless deletes the election key created at rev, if it is still
// there without a lease.
func (e *election) deleteLeaseless(ctx context.Context, key string, rev int64) error {
	resp, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev), clientv3.Compare(clientv3.LeaseValue(key), "=", clientv3.NoLease)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("coord: delete election key %s, which has no lease: %w", key, err)
	}
	if resp.Succeeded {
		e.log.Warn("deleted an election key without a lease: no session kept it, so it would have kept every member from leading (was it written by hand?)", "key", textsafe.Escape(key))
	}
	return nil
}

// waitDelete returns once key is deleted at or after revision rev.
func waitDelete(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range cli.Watch(wctx, key, clientv3.WithRev(rev)) {
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
		if err := wr.Err(); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("coord: watch of election key " + key + " ended")
}
