package consumer

import (
	"maps"
	"slices"
	"testing"

	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
)

// TestFlushedSkips: after a flush, a skip is deleted only when the
// completion of its record is in etcd: the flush wrote its range's state.
// A skip on a range whose write was fenced or refused (still dirty) waits
// for a later flush; one on a range no longer owned is left to the range's
// next owner, who finds its record done or applies it again.
func TestFlushedSkips(t *testing.T) {
	t.Parallel()
	p := &pipeline{}
	p.mu.ranges = make(map[string]*owned)
	p.mu.byTP = make(map[tp][]*owned)
	t0 := tp{Topic: "t"}
	for _, r := range []struct {
		lo, hi uint64
		dirty  bool
	}{{0, 1 << 31, false}, {1 << 31, ledger.HashSpace, true}} {
		rs := rangeOf(0, r.lo, r.hi, schema.StateActive, 1, 0)
		st, err := ledger.NewState(rs.Record.Range(), rs.Entry, 0)
		if err != nil {
			t.Fatal(err)
		}
		w := &owned{rs: rs, st: st, dirty: r.dirty, flushed: st.Version()}
		p.mu.ranges[rs.Key] = w
		p.mu.byTP[t0] = append(p.mu.byTP[t0], w)
	}
	skip := func(name string, partition int32, h uint64) coord.KeyOp {
		return coord.KeyOp{Name: name, Record: schema.KeyOpRecord{Op: schema.KeyOpSkip, Topic: "t", Partition: partition, Hash: h}}
	}
	written, fenced, gone := skip("written", 0, 5), skip("fenced", 0, 1<<31+5), skip("gone", 1, 5)
	p.mu.Lock()
	got := p.flushedSkipsLocked([]coord.KeyOp{written, fenced, gone}, (*owned).inEtcd)
	queued := slices.Clone(p.mu.skipsDone)
	p.mu.Unlock()
	names := func(ops []coord.KeyOp) []string {
		var out []string
		for _, op := range ops {
			out = append(out, op.Name)
		}
		return out
	}
	if !slices.Equal(names(got), []string{"written"}) {
		t.Errorf("skips to delete %v, want [written]: the others' completions are not in etcd", names(got))
	}
	if !slices.Equal(names(queued), []string{"fenced"}) {
		t.Errorf("skips waiting for the next flush %v, want [fenced]", names(queued))
	}
}

// TestForgetWritten: the member's last write revision of an operation is
// kept while the watch holds the operation, and dropped once it does not.
func TestForgetWritten(t *testing.T) {
	t.Parallel()
	p := &pipeline{}
	p.mu.keyOpWritten = map[string]int64{"done": 7, "running": 9}
	p.forgetWrittenLocked([]coord.KeyOp{{Name: "running", Rev: 8}, {Name: "other", Rev: 3}})
	if want := map[string]int64{"running": 9}; !maps.Equal(p.mu.keyOpWritten, want) {
		t.Errorf("written revisions %v, want %v: the finished operation's dropped, the running one's kept", p.mu.keyOpWritten, want)
	}
	p.forgetWrittenLocked(nil)
	if len(p.mu.keyOpWritten) != 0 {
		t.Errorf("written revisions %v after the watch holds nothing, want none", p.mu.keyOpWritten)
	}
}
