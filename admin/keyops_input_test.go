package admin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/testutil"
)

// TestKeyOpLongReason: a reason longer than an operation stores is
// refused as bad input, naming its length and the bound, before anything
// is changed: no operation stored, no parking topic created.
func TestKeyOpLongReason(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	startMember(t, e.Endpoints, k.Brokers, "m1", func(context.Context, *kafka.Message) error { return nil })
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	q := admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0}
	testutil.WaitFor(t, "the key's range", 30*time.Second, func() bool {
		info, err := g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("k"), Partition: 0, MaxScan: 1})
		return err == nil && info.Range != nil
	})
	long := strings.Repeat("r", 2000)
	_, perr := g.ParkKey(ctx, admin.ParkRequest{KeyQuery: q, Reason: long})
	_, rerr := g.ReplayKey(ctx, admin.ReplayRequest{KeyQuery: q, Reason: long})
	_, serr := g.SkipKey(ctx, admin.SkipRequest{KeyQuery: q, Reason: long})
	for name, err := range map[string]error{"park": perr, "replay": rerr, "skip": serr} {
		if !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), "a reason of 2000 bytes") {
			t.Errorf("%s with a reason of 2000 bytes: got %v, want ErrBadKeyQuery naming its length", name, err)
		}
	}
	if n := countKeyOps(t, cli); n != 0 {
		t.Errorf("%d operations stored", n)
	}
	ac, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	md, err := ac.GetMetadata(nil, true, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := md.Topics["orders"+admin.ParkedSuffix]; ok {
		t.Error("the refused park created its parking topic")
	}
}
