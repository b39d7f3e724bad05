package admin_test

import (
	"slices"
	"testing"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/state"
)

// TestStateOf: the state each combination of pause, members and range
// records reads as.
func TestStateOf(t *testing.T) {
	member := func(leaving bool) state.Member {
		return state.Member{MemberInfo: state.MemberInfo{Leaving: leaving}}
	}
	rng := func(owner, st string) state.RangeState {
		return state.RangeState{Record: state.RangeRecord{Topic: "orders", Owner: owner, State: st}}
	}
	two := map[string]state.Member{"m1": member(false), "m2": member(false)}
	for _, tc := range []struct {
		name    string
		paused  bool
		members map[string]state.Member
		ranges  []state.RangeState
		want    admin.State
	}{
		{"paused with members", true, two, []state.RangeState{rng("m1", state.StateActive)}, admin.Paused},
		{"paused without members", true, nil, nil, admin.Paused},
		{"no members, ranges left", false, nil, []state.RangeState{rng("m1", state.StateActive)}, admin.Empty},
		{"all active, owned", false, two, []state.RangeState{rng("m1", state.StateActive), rng("m2", state.StateActive)}, admin.Stable},
		{"a range revoking", false, two, []state.RangeState{rng("m1", state.StateActive), rng("m2", state.StateRevoking)}, admin.Rebalancing},
		{"a range released", false, two, []state.RangeState{rng("m1", state.StateReleased)}, admin.Rebalancing},
		{"a range owned by a gone member", false, two, []state.RangeState{rng("m3", state.StateActive)}, admin.Rebalancing},
		{"a member leaving", false, map[string]state.Member{"m1": member(true)}, []state.RangeState{rng("m1", state.StateActive)}, admin.Rebalancing},
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
