package admin

import (
	"context"
	"fmt"
	"sort"

	"github.com/keyshare/keyshare/coord"
)

// Topics lists the topics the group holds state of in etcd (range or
// commit records), sorted: what --all-topics resets.
func (g *Group) Topics(ctx context.Context) ([]string, error) {
	if err := g.known(ctx); err != nil {
		return nil, err
	}
	snap, err := coord.ReadSnapshot(ctx, g.cli, g.group)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	seen := make(map[string]bool)
	for _, r := range snap.Ranges {
		seen[r.Record.Topic] = true
	}
	for tp := range snap.Commits {
		seen[tp.Topic] = true
	}
	topics := make([]string, 0, len(seen))
	for t := range seen {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	return topics, nil
}
