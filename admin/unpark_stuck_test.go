package admin_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/testutil"
)

// TestUnparkFailingRecordIsStuck: a key is unparked with a parked record
// that keeps failing, and no live record of the key behind it. The
// record is the key's stuck record: key describe shows the report (its
// offset, attempts and what fails), and the report is withdrawn once the
// record is done.
func TestUnparkFailingRecordIsStuck(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1, "orders" + admin.ParkedSuffix: 1})
	var healed atomic.Bool
	handler := func(ctx context.Context, m *kafka.Message) error {
		if string(m.Value) == "bad" && !healed.Load() {
			return errors.New("the sink refuses it")
		}
		return nil
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", handler) // StuckTimeout 1s, no dead-letter topic
	g, q := parkedKey(t, cli, k.Brokers, "bad")
	ctx := t.Context()
	if _, err := g.UnparkKey(ctx, admin.UnparkRequest{KeyQuery: q, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	var info admin.KeyInfo
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if info, err = g.DescribeKey(ctx, q); err != nil {
			t.Fatal(err)
		}
		if info.Stuck != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("key describe shows no stuck report 30s after the unpark, its record failing: %+v", info)
		}
	}
	if s := info.Stuck; s.Offset != 1 || s.Attempts < 1 || !strings.Contains(s.Error, "unpark") || !strings.Contains(s.Error, "the sink refuses it") {
		t.Fatalf("stuck report %+v; want offset 1, an attempt or more, and an error naming the unpark and the handler's failure", *s)
	}
	healed.Store(true)
	testutil.WaitFor(t, "the unpark done", 30*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	testutil.WaitFor(t, "the stuck report withdrawn", 30*time.Second, func() bool {
		info, err := g.DescribeKey(ctx, q)
		return err == nil && info.Stuck == nil
	})
}
