package coord

import (
	"context"
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/ledger"
)

// Load reports: what each member measured of the ranges it owns.
//
// A member writes one report, load/<member-id>, under its lease, at most
// every Config.LoadReportInterval: one small put per member per interval,
// whatever the number of ranges (its etcd cost is in docs/benchmarks.md).
// The leader reads the reports from its watch-fed cache and places split
// points so that measured load, not hash width, is balanced (assign/balance.go).
// A report that is malformed, absurd or from a member that left moves
// nothing: the leader ignores it with one warning.

// Balance says what the leader balances among members when they share
// partitions.
type Balance string

const (
	// BalanceLoad places split points by the members' load reports when
	// that gains enough over the current layout (the default).
	BalanceLoad Balance = "load"
	// BalanceWidth gives every member hash space in proportion to its
	// weight, ignoring load (the layout before load reports existed; kept
	// for comparison and for groups whose keys are uniform).
	BalanceWidth Balance = "width"
)

// maxLoadValue bounds every rate in a report: more than a billion records,
// or worker-seconds, per second is not a measurement.
const maxLoadValue = 1e9

// LoadReport is a member's measurement of the ranges it owns over the last
// interval.
type LoadReport struct {
	V      int         `json:"v"`
	Member string      `json:"member"`
	At     time.Time   `json:"at"`     // the end of the interval, member's clock
	Window float64     `json:"window"` // the interval's length in seconds
	Ranges []RangeLoad `json:"ranges"`
}

// ReportLoad writes the member's load report under its lease, guarded by
// its registration (a member that left cannot write one).
func (s *Session) ReportLoad(ctx context.Context, r LoadReport) error {
	r.V, r.Member = recordVersion, s.ID()
	if err := r.check(); err != nil {
		return err
	}
	_, err := s.cli.Txn(ctx).If(s.common()...).
		Then(clientv3.OpPut(s.schema.Load(s.ID()), mustJSON(r), clientv3.WithLease(s.es.Lease()))).Commit()
	return err
}

// DecodeLoad reads a load report, refusing one whose numbers are not
// measurements (negative, NaN, infinite, enormous) or whose ranges are not
// ranges.
func DecodeLoad(key string, data []byte) (LoadReport, error) {
	var r LoadReport
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return LoadReport{}, err
	}
	if err := r.check(); err != nil {
		return LoadReport{}, &BadValueError{Key: key, Problem: err.Error()}
	}
	return r, nil
}

// check reports the first thing in r that is not a measurement.
func (r LoadReport) check() error {
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
		case len(rl.Buckets) > LoadBuckets || len(rl.Hot) > MaxHotKeys:
			return fmt.Errorf("load of %s: %d buckets, %d hot keys: want at most %d and %d", name, len(rl.Buckets), len(rl.Hot), LoadBuckets, MaxHotKeys)
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
