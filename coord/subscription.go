package coord

import (
	"context"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// Every member of a group consumes the same topics. The leader plans the
// ranges of its own topics (Config.Topics) and hands them to every member,
// so a member started with other topics would be given, and would consume,
// topics it was never told about, and the group's topics would change with
// its leader. Join therefore refuses a member whose topics differ from
// those of any live member. Changing a group's topics means stopping all
// its members first (or starting a new group).

// topicSet is topics sorted, each once: the form members compare.
func topicSet(topics []string) []string {
	return slices.Compact(slices.Sorted(slices.Values(topics)))
}

// checkSubscriptions reads the live members' topic lists and returns the
// revision it read them at, or a *TopicsDifferError if one differs from
// this member's. A list that cannot be read is not compared (a warning
// says so); this member's own, still alive from an earlier session, is
// left to the registration's guard (ErrMemberExists).
func (s *Session) checkSubscriptions(ctx context.Context, topics []string) (int64, error) {
	prefix := s.schema.Subscriptions()
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("coord: read the group's topics at %s: %w", prefix, err)
	}
	for _, kv := range resp.Kvs {
		id := strings.TrimPrefix(string(kv.Key), prefix)
		if id == s.ID() {
			continue
		}
		rec, err := schema.DecodeSubscription(string(kv.Key), kv.Value)
		if err != nil {
			s.log.Warn("cannot read a member's topics; not compared with this member's", "error", err)
			continue
		}
		if !slices.Equal(rec.Topics, topics) {
			return 0, &TopicsDifferError{Group: s.cfg.Group, Topics: topics, Member: id, MemberTopics: rec.Topics}
		}
	}
	return resp.Header.Revision, nil
}
