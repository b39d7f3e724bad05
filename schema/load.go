package schema

import (
	"fmt"
	"math"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/ledger"
)

// maxLoadValue bounds every rate in a report: more than a billion records,
// or worker-seconds, per second is not a measurement.
const maxLoadValue = 1e9

// LoadReport is a member's measurement of the ranges it owns over the last
// interval.
type LoadReport struct {
	V      int                `json:"v"`
	Member string             `json:"member"`
	At     time.Time          `json:"at"`     // the end of the interval, member's clock
	Window float64            `json:"window"` // the interval's length in seconds
	Ranges []assign.RangeLoad `json:"ranges"`
}

// ReceivedLoad is a member's load report as the leader's cache received it.
type ReceivedLoad struct {
	Report LoadReport
	// Rev is the ModRevision of the report's key.
	Rev int64
	// Arrived is when the leader's cache received this version, on the
	// leader's clock (with its monotonic reading).
	Arrived time.Time
}

// DecodeLoad reads a load report, refusing one whose numbers are not
// measurements (negative, NaN, infinite, enormous) or whose ranges are not
// ranges.
func DecodeLoad(key string, data []byte) (LoadReport, error) {
	var r LoadReport
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return LoadReport{}, err
	}
	if err := r.Check(); err != nil {
		return LoadReport{}, &BadValueError{Key: key, Problem: err.Error()}
	}
	return r, nil
}

// Check reports the first thing in r that is not a measurement.
func (r LoadReport) Check() error {
	if !sane(r.Window) || r.Window == 0 {
		return fmt.Errorf("load report window %v: want a positive number of seconds", r.Window)
	}
	for _, rl := range r.Ranges {
		name := fmt.Sprintf("%s/%d [%d,%d)", rl.Topic, rl.Partition, rl.Lo, rl.Hi)
		switch {
		case rl.Lo >= rl.Hi || rl.Hi > ledger.HashSpace || rl.Partition < 0 || rl.Topic == "":
			return fmt.Errorf("load of %s: not a range", name)
		case !sane(rl.RecordsPerSec) || !sane(rl.BusyPerSec) || rl.Backlog < 0:
			return fmt.Errorf("load of %s: records/s %v, busy/s %v, backlog %d: want finite numbers from 0 to %g", name, rl.RecordsPerSec, rl.BusyPerSec, rl.Backlog, float64(maxLoadValue))
		case len(rl.Buckets) > assign.LoadBuckets || len(rl.Hot) > assign.MaxHotKeys:
			return fmt.Errorf("load of %s: %d buckets, %d hot keys: want at most %d and %d", name, len(rl.Buckets), len(rl.Hot), assign.LoadBuckets, assign.MaxHotKeys)
		}
		for _, b := range rl.Buckets {
			if !sane(b) {
				return fmt.Errorf("load of %s: bucket %v: want a finite number from 0 to %g", name, b, float64(maxLoadValue))
			}
		}
		for _, h := range rl.Hot {
			if !sane(h.BusyPerSec) || h.Hash < rl.Lo || h.Hash >= rl.Hi {
				return fmt.Errorf("load of %s: hot key hash %d busy/s %v: want a hash in the range and a finite number from 0 to %g", name, h.Hash, h.BusyPerSec, float64(maxLoadValue))
			}
		}
	}
	return nil
}

// sane reports whether v could be a measured rate.
func sane(v float64) bool {
	return !math.IsNaN(v) && v >= 0 && v <= maxLoadValue
}
