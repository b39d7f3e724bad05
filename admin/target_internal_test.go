package admin

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestTarget: each target's new offset, clamped to [log start, log end]
// with a note as kafka-consumer-groups clamps, and the log end where the
// target has no answer.
func TestTarget(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	row := func(current int64) PlanRow {
		return PlanRow{Topic: "orders", Partition: 1, Current: current, LogStart: 10, LogEnd: 50}
	}
	for _, tc := range []struct {
		name    string
		r       Reset
		row     PlanRow
		asked   int64
		want    int64
		note    string
		wantErr string
	}{
		{"earliest", Reset{To: ToEarliest}, row(30), 0, 10, "", ""},
		{"latest", Reset{To: ToLatest}, row(30), 0, 50, "", ""},
		{"offset inside", Reset{To: ToOffset, Offset: 20}, row(30), 0, 20, "", ""},
		{"offset past the end", Reset{To: ToOffset, Offset: 100000}, row(30), 0, 50, "100000 is past the log end: clamped", ""},
		{"offset before the start", Reset{To: ToOffset, Offset: 3}, row(30), 0, 10, "3 is before the log start: clamped", ""},
		{"shift back", Reset{To: ShiftBy, Shift: -5}, row(30), 0, 25, "", ""},
		{"shift below the start", Reset{To: ShiftBy, Shift: -1000}, row(30), 0, 10, "-970 is before the log start: clamped", ""},
		{"shift forward past the end", Reset{To: ShiftBy, Shift: 40}, row(30), 0, 50, "70 is past the log end: clamped", ""},
		{"shift without a commit", Reset{To: ShiftBy, Shift: 1}, row(-1), 0, 0, "", "orders/1 has no committed offset to shift"},
		{"current", Reset{To: ToCurrent}, row(30), 0, 30, "", ""},
		{"current without a commit", Reset{To: ToCurrent}, row(-1), 0, 50, "no committed offset: log end", ""},
		{"current below a truncated log", Reset{To: ToCurrent}, row(4), 0, 10, "4 is before the log start: clamped", ""},
		{"datetime answered", Reset{To: ToDatetime, Time: at}, row(30), 17, 17, "", ""},
		{"datetime after the last record", Reset{To: ToDatetime, Time: at}, row(30), -1, 50, "no record at or after 2026-05-01T12:00:00Z: log end", ""},
		{"from file", Reset{To: ToOffsets}, row(30), 42, 42, "", ""},
		{"from file past the end", Reset{To: ToOffsets}, row(30), 60, 50, "60 is past the log end: clamped", ""},
		{"no target", Reset{}, row(30), 0, 0, "", "no target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := target(tc.r, tc.row, tc.asked)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadReset) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want ErrBadReset naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.New != tc.want || got.Note != tc.note {
				t.Fatalf("new %d note %q, want %d %q", got.New, got.Note, tc.want, tc.note)
			}
		})
	}
}
