package coord_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// TestResetOffsetsBesidePausedOwner: a reset guarded by the pause is
// written beside a live owner — ledger entry, commit record, and the range
// record again with a grown reset epoch — and the owner's next flush of the
// state it held before is fenced, so it cannot overwrite the reset. Without
// the pause, or with a pause that was lifted and set again since it was
// read, the reset is refused and nothing is written.
func TestResetOffsetsBesidePausedOwner(t *testing.T) {
	cli, e := testutil.StartEtcd(t)
	g := schema.Group{Name: "g"}
	a, _ := join(t, e.Endpoints, testConfig(t, "a", map[string]int32{"t": 1}))
	var asg schema.Assignment
	waitFor(t, "a owns a range", 30*time.Second, func() bool {
		select {
		case asg = <-a.Updates():
		default:
		}
		return len(asg.Ranges) == 1
	})
	held := asg.Ranges[0]
	flush := func(next int64) error {
		return a.Flush(context.Background(), []coord.RangeFlush{{
			Range: held, Entry: ledger.Entry{Segments: []ledger.Segment{{Lo: 0, Hi: ledger.HashSpace, Next: next}}},
		}})
	}
	if err := flush(50); err != nil {
		t.Fatalf("owner's flush before the reset: %v", err)
	}
	tp0 := assign.TopicPartition{Topic: "t", Partition: 0}
	resets := []coord.OffsetReset{{TopicPartition: tp0, Offset: 7}}
	at := time.Now().UTC()

	// Live and not paused: refused, nothing written.
	before := snapshot(t, cli)
	if err := coord.ResetOffsets(t.Context(), cli, g, before, resets, coord.ResetGuard{}, "test", at); !errors.Is(err, coord.ErrGroupChanged) {
		t.Fatalf("reset beside a live member without a pause: %v, want ErrGroupChanged", err)
	}
	if got := snapshot(t, cli); got.Rev != before.Rev {
		t.Fatalf("the refused reset wrote: revision %d → %d", before.Rev, got.Rev)
	}

	if err := coord.WritePause(t.Context(), cli, g, schema.PauseRecord{By: "test"}); err != nil {
		t.Fatal(err)
	}
	pause, _, err := coord.ReadPause(t.Context(), cli, g)
	if err != nil || !pause.Paused || pause.Rev == 0 {
		t.Fatalf("pause %+v, %v; want paused at a revision", pause, err)
	}
	stale := pause.Rev
	// Resumed and paused again since the pause was read: refused.
	if _, err := coord.DeletePause(t.Context(), cli, g); err != nil {
		t.Fatal(err)
	}
	if err := coord.WritePause(t.Context(), cli, g, schema.PauseRecord{By: "test"}); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, cli)
	if err := coord.ResetOffsets(t.Context(), cli, g, snap, resets, coord.ResetGuard{PausedRev: stale}, "test", at); !errors.Is(err, coord.ErrGroupChanged) {
		t.Fatalf("reset under a pause lifted since it was read: %v, want ErrGroupChanged", err)
	}

	pause, _, err = coord.ReadPause(t.Context(), cli, g)
	if err != nil {
		t.Fatal(err)
	}
	rev := pause.Rev
	snap = snapshot(t, cli)
	if err := coord.ResetOffsets(t.Context(), cli, g, snap, resets, coord.ResetGuard{PausedRev: rev}, "test", at); err != nil {
		t.Fatalf("reset under the pause: %v", err)
	}
	after := snapshot(t, cli)
	if len(after.Ranges) != 1 {
		t.Fatalf("%d ranges after the reset, want 1", len(after.Ranges))
	}
	r := after.Ranges[0]
	if r.Record.Reset != snap.Rev || r.Record.Owner != "a" || r.Record.State != schema.StateActive || r.Record.Gen != held.Record.Gen {
		t.Fatalf("range record after the reset %+v: want owner a, active, generation %d as before, reset epoch %d", r.Record, held.Record.Gen, snap.Rev)
	}
	if wm, ok := r.Entry.Watermark(); !ok || wm != 7 {
		t.Fatalf("ledger watermark %d (%v) after the reset, want 7", wm, ok)
	}
	if c := after.Commits[tp0]; c.Offset != 7 {
		t.Fatalf("commit record %+v, want offset 7", c)
	}

	// The owner's flush of what it held before the reset is fenced.
	err = flush(60)
	var fe *coord.FencedError
	if !errors.As(err, &fe) || fe.Session || len(fe.Keys) != 1 || fe.Keys[0] != held.Key {
		t.Fatalf("owner's flush after the reset: %v, want fenced on %s", err, held.Key)
	}
	if wm, _ := snapshot(t, cli).Ranges[0].Entry.Watermark(); wm != 7 {
		t.Fatalf("watermark %d after the fenced flush, want the reset's 7", wm)
	}

	// A second reset's epoch is above the first one's.
	snap2 := snapshot(t, cli)
	if err := coord.ResetOffsets(t.Context(), cli, g, snap2, resets, coord.ResetGuard{PausedRev: rev}, "test", at); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, cli).Ranges[0].Record.Reset; got <= r.Record.Reset {
		t.Fatalf("second reset epoch %d, want above the first %d", got, r.Record.Reset)
	}
}

// TestResetOffsetsPartitionTooLarge: a partition is reset whole in one
// transaction; one cut into more ranges than fit is refused before
// anything is written, naming the partition and the limit.
func TestResetOffsetsPartitionTooLarge(t *testing.T) {
	cli, _ := testutil.StartEtcd(t)
	snap := &schema.Snapshot{Rev: 5}
	step := ledger.HashSpace / 50
	for i := range uint64(50) {
		snap.Ranges = append(snap.Ranges, schema.RangeState{
			Key:    "ranges/t/0/" + string(rune('a'+i)),
			Record: schema.RangeRecord{V: 1, Topic: "t", Partition: 0, Lo: i * step, Hi: (i + 1) * step, Owner: "a", State: schema.StateActive},
		})
	}
	err := coord.ResetOffsets(t.Context(), cli, schema.Group{Name: "g"}, snap,
		[]coord.OffsetReset{{TopicPartition: assign.TopicPartition{Topic: "t", Partition: 0}, Offset: 3}}, coord.ResetGuard{}, "test", time.Now())
	if err == nil || !strings.Contains(err.Error(), "t/0 has 50 ranges") || !strings.Contains(err.Error(), "nothing was written") {
		t.Fatalf("reset of a partition of 50 ranges: %v, want it refused naming t/0 and its 50 ranges", err)
	}
	if n, err := coord.CountKeys(t.Context(), cli, schema.Group{Name: "g"}); err != nil || n != 0 {
		t.Fatalf("%d keys written (%v), want none", n, err)
	}
}
