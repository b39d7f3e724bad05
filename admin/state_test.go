package admin_test

import (
	"slices"
	"testing"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/schema"
)

// TestStateOf: the state each combination of pause, members and range
// records reads as.
func TestStateOf(t *testing.T) {
	member := func(leaving bool) schema.Member {
		return schema.Member{MemberInfo: schema.MemberInfo{Leaving: leaving}}
	}
	rng := func(owner, st string) schema.RangeState {
		return schema.RangeState{Record: schema.RangeRecord{Topic: "orders", Owner: owner, State: st}}
	}
	two := map[string]schema.Member{"m1": member(false), "m2": member(false)}
	for _, tc := range []struct {
		name    string
		paused  bool
		members map[string]schema.Member
		ranges  []schema.RangeState
		want    admin.State
	}{
		{"paused with members", true, two, []schema.RangeState{rng("m1", schema.StateActive)}, admin.Paused},
		{"paused without members", true, nil, nil, admin.Paused},
		{"no members, ranges left", false, nil, []schema.RangeState{rng("m1", schema.StateActive)}, admin.Empty},
		{"all active, owned", false, two, []schema.RangeState{rng("m1", schema.StateActive), rng("m2", schema.StateActive)}, admin.Stable},
		{"a range revoking", false, two, []schema.RangeState{rng("m1", schema.StateActive), rng("m2", schema.StateRevoking)}, admin.Rebalancing},
		{"a range released", false, two, []schema.RangeState{rng("m1", schema.StateReleased)}, admin.Rebalancing},
		{"a range owned by a gone member", false, two, []schema.RangeState{rng("m3", schema.StateActive)}, admin.Rebalancing},
		{"a member leaving", false, map[string]schema.Member{"m1": member(true)}, []schema.RangeState{rng("m1", schema.StateActive)}, admin.Rebalancing},
		{"members, no ranges yet", false, two, nil, admin.Stable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := admin.StateOf(tc.paused, tc.members, tc.ranges); got != tc.want {
				t.Fatalf("%s, want %s", got, tc.want)
			}
		})
	}
}

// TestGroupNames: the groups under a prefix are the first path elements
// whose next element is a group's key; other trees and nested prefixes
// are not groups of this prefix.
func TestGroupNames(t *testing.T) {
	keys := []string{
		"/keyshare/orders/generation",
		"/keyshare/orders/members/m1",
		"/keyshare/orders/ranges/orders/00000/0000000000",
		"/keyshare/paused-only/paused",
		"/keyshare/committed/commits/orders/00000",
		"/keyshare/team/payments/generation", // a group under prefix /keyshare/team
		"/keyshare/stray",                    // no group under it
		"/keyshare/junk/notes",               // not a group's key
		"/other/x/generation",                // another prefix
		"/keyshareX/y/generation",            // a prefix that only starts the same
	}
	for _, prefix := range []string{"/keyshare", "/keyshare/"} {
		got := admin.GroupNames(prefix, keys)
		want := []string{"committed", "orders", "paused-only"}
		if !slices.Equal(got, want) {
			t.Fatalf("prefix %q: %v, want %v", prefix, got, want)
		}
	}
}
