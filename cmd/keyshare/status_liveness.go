package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// What status reads beside the group view: whether the group exists, how
// long each member's lease has left, and the members' load reports (their
// last-seen time and records/s, and their ranges' hot keys).

// errUnknownGroup is a group with no key under its root.
var errUnknownGroup = errors.New("unknown group")

// unknownGroupError names the group, the prefix and what to check.
func unknownGroupError(s schema.Keys) error {
	return fmt.Errorf("%w %q: no key under %s in etcd (prefix %q); check --group, --prefix and --etcd (keyshare member creates the group when it first joins)",
		errUnknownGroup, s.Group(), s.Root(), s.Prefix())
}

// checkGroupExists fails with errUnknownGroup when nothing is stored under
// the group's root: a count, not a read of the keys.
func checkGroupExists(ctx context.Context, cli *clientv3.Client, s schema.Keys) error {
	resp, err := cli.Get(ctx, s.Root(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("read group %s: %w; check --etcd", s.Root(), err)
	}
	if resp.Count == 0 {
		return unknownGroupError(s)
	}
	return nil
}

// loadReports reads the members' load reports and the names of their hot
// keys, by member id. A value that does not decode, or names another
// member than its key, is left out and named in problems.
func loadReports(ctx context.Context, cli *clientv3.Client, s schema.Keys) (reports []schema.LoadReport, names map[string]schema.HotKeyNames, problems []string, err error) {
	resp, err := cli.Txn(ctx).Then(clientv3.OpGet(s.Loads(), clientv3.WithPrefix()), clientv3.OpGet(s.HotKeysPrefix(), clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read load reports: %w; check --etcd", err)
	}
	names = map[string]schema.HotKeyNames{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		key := string(kv.Key)
		id := strings.TrimPrefix(key, s.HotKeysPrefix())
		n, err := schema.DecodeHotKeys(key, kv.Value)
		if err == nil && n.Member != id {
			err = &schema.BadValueError{Key: key, Problem: fmt.Sprintf("hot keys of member %q under the key of %q", n.Member, id)}
		}
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		names[id] = n
	}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		key := string(kv.Key)
		r, err := schema.DecodeLoad(key, kv.Value)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		reports = append(reports, r)
	}
	return reports, names, problems, nil
}

// leaseTTLs asks etcd how many seconds each lease has left, a few at a
// time (etcd answers one lease per request). A lease etcd no longer knows
// has -1; one that could not be asked is left out.
func leaseTTLs(ctx context.Context, cli *clientv3.Client, leases []int64) map[int64]int64 {
	const parallel = 8
	ttl := make(map[int64]int64, len(leases))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallel)
	for _, l := range leases {
		if l == 0 {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			resp, err := cli.TimeToLive(ctx, clientv3.LeaseID(l))
			if err != nil {
				return
			}
			mu.Lock()
			ttl[l] = resp.TTL
			mu.Unlock()
		}()
	}
	wg.Wait()
	return ttl
}
