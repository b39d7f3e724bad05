package assign

// LoadBuckets is the number of equal-width parts of a range's hash space a
// RangeLoad's histogram has.
const LoadBuckets = 16

// MaxHotKeys is the most hot keys a RangeLoad lists.
const MaxHotKeys = 4

// RangeLoad is the load of one owned range.
type RangeLoad struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Lo        uint64 `json:"lo"`
	Hi        uint64 `json:"hi"`
	// RecordsPerSec is the records of the range handled per second.
	RecordsPerSec float64 `json:"records_per_sec"`
	// BusyPerSec is the worker-seconds per second the range's records
	// took in the handler: 1 is one worker busy all the time.
	BusyPerSec float64 `json:"busy_per_sec"`
	// Backlog is the range's records fetched and not yet handled, at the
	// end of the interval.
	Backlog int64 `json:"backlog"`
	// Buckets is BusyPerSec over LoadBuckets equal-width parts of [Lo, Hi)
	// (the last part takes the remainder); empty when nothing ran.
	Buckets []float64 `json:"buckets,omitempty"`
	// Hot are the keys (by hash) with the most busy time, at most
	// MaxHotKeys, busiest first. Their time is also in Buckets.
	Hot []HotKey `json:"hot,omitempty"`
}

// HotKey is one key's share of a range's load.
type HotKey struct {
	Hash       uint64  `json:"hash"`
	BusyPerSec float64 `json:"busy_per_sec"`
}
