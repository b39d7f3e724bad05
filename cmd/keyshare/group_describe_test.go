package main

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/state"
)

// TestDescribeJSON: describe --json carries what status read under
// snake_case names, and none of the records' internals (the version "v",
// CreateRev, DrainMs), whatever those hold.
func TestDescribeJSON(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	seven, nine := int64(7), int64(9)
	st := &groupStatus{
		Group: "g", Leader: "m1", Generation: 4,
		Paused: &state.PauseRecord{V: 1, By: "ops@host", Reason: "deploy", At: at},
		Members: []state.Member{{MemberInfo: state.MemberInfo{V: 1, ID: "m1", Host: "h1", PID: 42, Started: at, Weight: 1},
			CreateRev: 99, DrainMs: 5000, Lease: 7}},
		Partitions: []partitionStatus{{Topic: "orders", Partition: 0, Safe: &seven, Committed: &seven, End: &nine,
			Ranges: []rangeStatus{{Lo: 0, Hi: 1 << 32, Owner: "m1", State: "active", Watermark: &seven, Pending: 2}}}},
		Stuck:  []state.StuckRecord{{V: 1, Member: "m1", Topic: "orders", Offset: 7, Key: "k", Since: at, Attempts: 3}},
		Losses: []state.LossRecord{{V: 1, Member: "m1", Topic: "orders", Hi: 1 << 32, At: at, Loss: ledger.Loss{LogStart: 5, Segments: []ledger.LostSegment{{Hi: 1 << 32, UnreadFrom: 2}}}}},
	}
	b, err := json.Marshal(describeOf(st, admin.Paused))
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) || k == "v" || k == "create_rev" || k == "drain_ms" || k == "lease" {
					t.Errorf("%s.%s: not a snake_case public field", path, k)
				}
				walk(path+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(path+"[]", x)
			}
		}
	}
	walk("", doc)
	want := `{"group":"g","state":"Paused","leader":"m1","generation":4,` +
		`"paused":{"by":"ops@host","reason":"deploy","since":"2026-05-01T12:00:00Z"},` +
		`"members":[{"id":"m1","host":"h1","pid":42,"started":"2026-05-01T12:00:00Z","weight":1,"leaving":false}],` +
		`"partitions":[{"topic":"orders","partition":0,"safe_watermark":7,"committed":7,"end_offset":9,"lag":null,"fetched":null,` +
		`"ranges":[{"lo":0,"hi":4294967296,"owner":"m1","state":"active","target":"","watermark":7,"pending":2}]}],` +
		`"stuck":[{"member":"m1","topic":"orders","partition":0,"lo":0,"offset":7,"key":"k","since":"2026-05-01T12:00:00Z","attempts":3,"error":""}],` +
		`"lost_to_retention":[{"member":"m1","topic":"orders","partition":0,"lo":0,"hi":4294967296,"at":"2026-05-01T12:00:00Z","log_start":5,` +
		`"segments":[{"lo":0,"hi":4294967296,"pending":[],"unread_from":2}]}],"problems":[]}`
	if string(b) != want {
		t.Fatalf("describe --json:\n%s\nwant\n%s", b, want)
	}
	// An empty group: lists are [], not null.
	b, _ = json.Marshal(describeOf(&groupStatus{Group: "g"}, admin.Empty))
	if string(b) != `{"group":"g","state":"Empty","leader":"","generation":0,"members":[],"partitions":[],"stuck":[],"lost_to_retention":[],"problems":[]}` {
		t.Fatalf("empty group: %s", b)
	}
}

// TestStateOfStatus: describe's state comes from the members and ranges
// status read.
func TestStateOfStatus(t *testing.T) {
	m1 := state.Member{MemberInfo: state.MemberInfo{ID: "m1"}}
	part := func(owner, st string) []partitionStatus {
		return []partitionStatus{{Topic: "orders", Ranges: []rangeStatus{{Owner: owner, State: st}}}}
	}
	for _, tc := range []struct {
		name string
		st   groupStatus
		want admin.State
	}{
		{"stable", groupStatus{Members: []state.Member{m1}, Partitions: part("m1", "active")}, admin.Stable},
		{"revoking", groupStatus{Members: []state.Member{m1}, Partitions: part("m1", "revoking")}, admin.Rebalancing},
		{"owner gone", groupStatus{Members: []state.Member{m1}, Partitions: part("m2", "active")}, admin.Rebalancing},
		{"empty", groupStatus{Partitions: part("m1", "active")}, admin.Empty},
		{"paused", groupStatus{Paused: &state.PauseRecord{}, Members: []state.Member{m1}}, admin.Paused},
	} {
		if got := stateOfStatus(&tc.st); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
