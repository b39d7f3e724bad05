package admin

import (
	"fmt"
	"time"
)

// Target says where a reset moves a partition.
type Target int

// Reset targets.
const (
	ToEarliest Target = iota + 1 // the log start
	ToLatest                     // the log end
	ToOffset                     // Reset.Offset
	ToDatetime                   // the first record at or after Reset.Time
	ShiftBy                      // current + Reset.Shift
	ToCurrent                    // the committed offset (the log end where none is committed)
	ToOffsets                    // each partition's offset in Reset.Offsets
)

// Reset describes an offset reset.
type Reset struct {
	To     Target
	Offset int64
	Time   time.Time
	Shift  int64
	// Offsets holds, for ToOffsets, the offset of each partition to reset
	// (keyshare group reset-offsets --from-file).
	Offsets []PartitionOffset
}

// PartitionOffset is one partition's offset.
type PartitionOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}

// PlanRow is one partition of a reset plan.
type PlanRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Current   int64  `json:"current"` // committed offset; -1 if none
	New       int64  `json:"new"`
	LogStart  int64  `json:"log_start"`
	LogEnd    int64  `json:"log_end"`
	// Note says why New is not what the target asked for: it was clamped
	// to the log's bounds, or the target had no answer and New is the
	// log end. Empty when New is what was asked.
	Note string `json:"note,omitempty"`
}

// target sets row.New for reset r, given the row's committed offset and
// log bounds, asked (the offset the target names where it names one per
// partition: the broker's answer for a time, -1 for none; the file's
// offset for ToOffsets). Like kafka-consumer-groups, it clamps a target
// outside [LogStart, LogEnd] to the nearer bound, and says so in
// row.Note: a reset past the log's end or before its start has nothing
// to fetch there.
func target(r Reset, row PlanRow, asked int64) (PlanRow, error) {
	switch r.To {
	case ToEarliest:
		row.New = row.LogStart
	case ToLatest:
		row.New = row.LogEnd
	case ToOffset:
		row.New = r.Offset
	case ToOffsets:
		row.New = asked
	case ToDatetime:
		row.New = asked
		if asked < 0 {
			row.New, row.Note = row.LogEnd, "no record at or after "+r.Time.UTC().Format(time.RFC3339)+": log end"
		}
	case ToCurrent:
		row.New = row.Current
		if row.Current < 0 {
			row.New, row.Note = row.LogEnd, "no committed offset: log end"
		}
	case ShiftBy:
		if row.Current < 0 {
			return row, fmt.Errorf("%w: --shift-by: %s/%d has no committed offset to shift; reset it with --to-earliest, --to-latest or --to-offset first", ErrBadReset, row.Topic, row.Partition)
		}
		row.New = row.Current + r.Shift
	default:
		return row, fmt.Errorf("%w: no target", ErrBadReset)
	}
	switch {
	case row.New < row.LogStart:
		row.Note = fmt.Sprintf("%d is before the log start: clamped", row.New)
		row.New = row.LogStart
	case row.New > row.LogEnd:
		row.Note = fmt.Sprintf("%d is past the log end: clamped", row.New)
		row.New = row.LogEnd
	}
	return row, nil
}

// Selector picks a topic's partition, or all of them (Partition -1).
type Selector struct {
	Topic     string
	Partition int32
}
