package admin

import (
	"context"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/schema"
)

// State is a group's state as an operator sees it, named as
// kafka-consumer-groups names a classic group's.
type State string

// Group states, in the order StateOf tests them.
const (
	// Paused: an operator paused the group (the paused key stands), with or
	// without members.
	Paused State = "Paused"
	// Empty: no member is registered.
	Empty State = "Empty"
	// Rebalancing: members are registered, and a range is revoking or
	// released, is owned by no registered member, or a member is leaving.
	Rebalancing State = "Rebalancing"
	// Stable: members are registered, and every range is active and owned
	// by one of them.
	Stable State = "Stable"
)

// StateOf derives the group's state from its etcd state: the pause, the
// registered members and the range records.
func StateOf(paused bool, members map[string]schema.Member, ranges []schema.RangeState) State {
	if paused {
		return Paused
	}
	if len(members) == 0 {
		return Empty
	}
	for _, m := range members {
		if m.Leaving {
			return Rebalancing
		}
	}
	for _, r := range ranges {
		if _, ok := members[r.Record.Owner]; !ok || r.Record.State != schema.StateActive {
			return Rebalancing
		}
	}
	return Stable
}

// State reads the group's state.
func (g *Group) State(ctx context.Context) (State, error) {
	if err := g.known(ctx); err != nil {
		return "", err
	}
	v, err := coord.ReadGroupView(ctx, g.cli, g.group)
	if err != nil {
		return "", fmt.Errorf("admin: %w", err)
	}
	return StateOf(v.Pause.Paused, v.Members, v.Ranges), nil
}

// Summary is one group in a listing.
type Summary struct {
	Name    string `json:"name"`
	State   State  `json:"state"`
	Members int    `json:"members"`
}

// groupKeys are the names directly under a group's root that mark it as
// one: a group that ever ran has a generation, range or commit records; a
// running one has members; a paused one has the paused key.
var groupKeys = []string{"generation", "members/", "ranges/", "commits/", "paused"}

// GroupNames picks the group names out of the keys under prefix: the first
// path element after the prefix, for keys whose next element marks a
// group (groupKeys). Sorted, each once.
func GroupNames(prefix string, keys []string) []string {
	root := strings.TrimRight(prefix, "/") + "/"
	seen := make(map[string]bool)
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, root)
		if !ok {
			continue
		}
		name, tail, ok := strings.Cut(rest, "/")
		if !ok || name == "" || seen[name] {
			continue
		}
		for _, mark := range groupKeys {
			if tail == mark || (strings.HasSuffix(mark, "/") && strings.HasPrefix(tail, mark)) {
				seen[name] = true
				break
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// List lists the groups under prefix with their states. It reads the
// prefix's keys (without values) once, then each group's state.
func List(ctx context.Context, cli *clientv3.Client, prefix string) ([]Summary, error) {
	root := strings.TrimRight(prefix, "/") + "/"
	resp, err := cli.Get(ctx, root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("admin: list the keys under %s: %w", root, err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	var out []Summary
	for _, name := range GroupNames(prefix, keys) {
		if coord.CheckName("group", name) != nil {
			continue
		}
		v, err := coord.ReadGroupView(ctx, cli, schema.Group{Prefix: prefix, Name: name})
		if err != nil {
			return nil, fmt.Errorf("admin: %w", err)
		}
		out = append(out, Summary{Name: name, State: StateOf(v.Pause.Paused, v.Members, v.Ranges), Members: len(v.Members)})
	}
	return out, nil
}
