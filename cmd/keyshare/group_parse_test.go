package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/cmd/internal/cli"
)

func TestParseTopicSpec(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		want    []admin.Selector
		wantErr string
	}{
		{"orders", []admin.Selector{{Topic: "orders", Partition: -1}}, ""},
		{"orders:3", []admin.Selector{{Topic: "orders", Partition: 3}}, ""},
		{"orders:0,1,2", []admin.Selector{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}, {Topic: "orders", Partition: 2}}, ""},
		{"orders:x", nil, `--topic "orders:x": "x" is not a partition number; want T, T:P or T:P,P,...`},
		{"orders:0,,1", nil, `"" is not a partition number`},
		{"orders:-1", nil, `"-1" is not a partition number`},
		{"orders:", nil, `"" is not a partition number`},
		{":0", nil, "--topic"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := parseTopicSpec(tc.spec)
			checkParse(t, got, err, tc.want, tc.wantErr)
		})
	}
}

func TestParseISODuration(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"PT30M", 30 * time.Minute, false},
		{"P1DT2H30M", 26*time.Hour + 30*time.Minute, false},
		{"P2D", 48 * time.Hour, false},
		{"PT1.5S", 1500 * time.Millisecond, false},
		{"pt15m", 15 * time.Minute, false},
		{"PT0S", 0, false},
		{"P", 0, true},
		{"PT", 0, true},
		{"P1DT", 0, true},
		{"30m", 0, true},
		{"-PT5M", 0, true},
		{"P1W", 0, true},
		{"PT5M30H", 0, true}, // units out of order
		{"P99999999999999999999D", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseISODuration(tc.in)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), `--by-duration "`+tc.in+`": want an ISO-8601 duration PnDTnHnMnS`) {
					t.Fatalf("got %v, %v; want an error naming %q and the format", got, err, tc.in)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestParseDatetime(t *testing.T) {
	berlin := time.FixedZone("CEST", 2*3600)
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"2024-05-01T12:00:00Z", time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), false},
		{"2024-05-01T12:00:00.250Z", time.Date(2024, 5, 1, 12, 0, 0, 250e6, time.UTC), false},
		{"2024-05-01T12:00:00+02:00", time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), false},
		{"2024-05-01T12:00:00-0130", time.Date(2024, 5, 1, 13, 30, 0, 0, time.UTC), false},
		// No zone: the local zone (here CEST, UTC+2), as Kafka reads it.
		{"2024-05-01T12:00:00", time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), false},
		{"2024-05-01T12:00:00.000", time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC), false},
		{"2024-05-01", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"2024-05-01 12:00:00", time.Time{}, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseDatetime(tc.in, berlin)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), `--to-datetime "`+tc.in+`": want YYYY-MM-DDTHH:mm:SS[.sss][zone]`) {
					t.Fatalf("got %v, %v; want an error naming %q and the format", got, err, tc.in)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestOffsetsCSV(t *testing.T) {
	po := func(topic string, p int32, o int64) admin.PartitionOffset {
		return admin.PartitionOffset{Topic: topic, Partition: p, Offset: o}
	}
	for _, tc := range []struct {
		name, in string
		want     []admin.PartitionOffset
		wantErr  string
	}{
		{"kafka's export", "orders,0,17\norders,1,4\n\npayments,0,0\n", []admin.PartitionOffset{po("orders", 0, 17), po("orders", 1, 4), po("payments", 0, 0)}, ""},
		{"spaces and CRLF", "orders, 0, 17\r\n", []admin.PartitionOffset{po("orders", 0, 17)}, ""},
		{"two columns", "orders,0\n", nil, `--from-file plan.csv line 1 "orders,0": want topic,partition,offset`},
		{"a header", "topic,partition,offset\n", nil, `line 1 "topic,partition,offset": partition "partition" is not a partition number`},
		{"negative offset", "orders,0,-1\n", nil, `offset "-1" is not an offset`},
		{"a partition twice", "orders,0,1\norders,0,2\n", nil, "line 2: orders/0 is on line 1 too; give each partition once"},
		{"empty", "\n\n", nil, "--from-file plan.csv: no topic,partition,offset line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseOffsetsCSV("plan.csv", strings.NewReader(tc.in))
			checkParse(t, got, err, tc.want, tc.wantErr)
		})
	}
	// --export writes what --from-file reads.
	plan := []admin.PlanRow{{Topic: "orders", Partition: 0, New: 17}, {Topic: "orders", Partition: 1, New: 4}}
	var b bytes.Buffer
	if err := writeOffsetsCSV(&b, plan); err != nil {
		t.Fatal(err)
	}
	if b.String() != "orders,0,17\norders,1,4\n" {
		t.Fatalf("export wrote %q", b.String())
	}
	back, err := parseOffsetsCSV("x", &b)
	if err != nil || !reflect.DeepEqual(back, []admin.PartitionOffset{po("orders", 0, 17), po("orders", 1, 4)}) {
		t.Fatalf("read back %v, %v", back, err)
	}
}

// TestResetFlags: the flags' combinations a reset takes, and what each
// turns into.
func TestResetFlags(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	orders := []admin.Selector{{Topic: "orders", Partition: -1}}
	for _, tc := range []struct {
		name    string
		f       resetFlags
		want    admin.Reset
		sel     []admin.Selector
		wantErr string
	}{
		{"earliest", resetFlags{topics: cli.List{"orders"}, targets: []string{"--to-earliest"}}, admin.Reset{To: admin.ToEarliest}, orders, ""},
		{"current, partitions", resetFlags{topics: cli.List{"orders:0,1"}, toCurrent: true, targets: []string{"--to-current"}},
			admin.Reset{To: admin.ToCurrent}, []admin.Selector{{Topic: "orders", Partition: 0}, {Topic: "orders", Partition: 1}}, ""},
		{"by duration", resetFlags{allTopics: true, byDuration: "PT30M", targets: []string{"--by-duration"}}, admin.Reset{To: admin.ToDatetime, Time: now.Add(-30 * time.Minute)}, nil, ""},
		{"datetime", resetFlags{topics: cli.List{"orders"}, toDatetime: "2026-04-30T00:00:00", targets: []string{"--to-datetime"}},
			admin.Reset{To: admin.ToDatetime, Time: time.Date(2026, 4, 30, 0, 0, 0, 0, time.UTC)}, orders, ""},
		{"offset", resetFlags{topics: cli.List{"orders"}, toOffset: 7, targets: []string{"--to-offset"}}, admin.Reset{To: admin.ToOffset, Offset: 7}, orders, ""},
		{"shift", resetFlags{topics: cli.List{"orders"}, shiftBy: -3, targets: []string{"--shift-by"}}, admin.Reset{To: admin.ShiftBy, Shift: -3}, orders, ""},
		{"from file", resetFlags{fromFile: "plan.csv", targets: []string{"--from-file"}}, admin.Reset{To: admin.ToOffsets}, nil, ""},
		{"two targets", resetFlags{topics: cli.List{"orders"}, targets: []string{"--to-earliest", "--to-latest"}}, admin.Reset{}, nil, "give exactly one of --to-earliest, --to-latest, --to-current, --to-offset, --to-datetime, --by-duration, --shift-by, --from-file (got --to-earliest, --to-latest)"},
		{"no target", resetFlags{topics: cli.List{"orders"}}, admin.Reset{}, nil, "(got none)"},
		{"no scope", resetFlags{targets: []string{"--to-earliest"}}, admin.Reset{}, nil, "say which partitions: --topic T, T:P or T:P,P,..., or --all-topics"},
		{"two scopes", resetFlags{topics: cli.List{"orders"}, allTopics: true, targets: []string{"--to-earliest"}}, admin.Reset{}, nil, "give --topic or --all-topics, not both"},
		{"file and topic", resetFlags{topics: cli.List{"orders"}, fromFile: "p.csv", targets: []string{"--from-file"}}, admin.Reset{}, nil, "--from-file names its partitions: drop --topic and --all-topics"},
		{"execute and dry run", resetFlags{topics: cli.List{"orders"}, execute: true, dryRun: true, targets: []string{"--to-latest"}}, admin.Reset{}, nil, "give --execute or --dry-run, not both"},
		{"negative offset", resetFlags{topics: cli.List{"orders"}, toOffset: -2, targets: []string{"--to-offset"}}, admin.Reset{}, nil, "--to-offset -2: want an offset, 0 or more"},
		{"bad duration", resetFlags{topics: cli.List{"orders"}, byDuration: "30m", targets: []string{"--by-duration"}}, admin.Reset{}, nil, `--by-duration "30m"`},
		{"bad topic", resetFlags{topics: cli.List{"orders:a"}, targets: []string{"--to-latest"}}, admin.Reset{}, nil, `--topic "orders:a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, sel, err := tc.f.reset(now, time.UTC)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r, tc.want) || !reflect.DeepEqual(sel, tc.sel) {
				t.Fatalf("got %+v %v, want %+v %v", r, sel, tc.want, tc.sel)
			}
		})
	}
}

func checkParse[T any](t *testing.T, got T, err error, want T, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("got %v, error %v; want an error containing %q", got, err, wantErr)
		}
		return
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
}
