package coord

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/schema"
)

// Load reports: what each member measured of the ranges it owns.
//
// A member writes one report, load/<member-id>, under its lease, at most
// every Config.LoadReportInterval: one small put per member per interval,
// whatever the number of ranges (its etcd cost is in docs/benchmarks.md),
// and in the same transaction, when they changed, the names of its hot
// keys (hotkeys/<member-id>), which keyshare status shows.
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

// ReportLoad writes the member's load report under its lease, guarded by
// its registration (a member that left cannot write one), and with names
// not nil, in the same transaction, the names of its hot keys
// (hotkeys/<member-id>, for operators; no leader reads them).
func (s *Session) ReportLoad(ctx context.Context, r schema.LoadReport, names *schema.HotKeyNames) error {
	r.V, r.Member = recordVersion, s.ID()
	if err := r.Check(); err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(s.schema.Load(s.ID()), mustJSON(r), clientv3.WithLease(s.es.Lease()))}
	if names != nil {
		n := *names
		n.V, n.Member = recordVersion, s.ID()
		if n.Keys == nil {
			n.Keys = []schema.HotKeyName{}
		}
		if err := n.Check(); err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(s.schema.HotKeys(s.ID()), mustJSON(n), clientv3.WithLease(s.es.Lease())))
	}
	_, err := s.cli.Txn(ctx).If(s.common()...).Then(ops...).Commit()
	return err
}
