package admin_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/admin"
	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/testutil"
)

// TestReplayKeyWhileMemberJoins: records of eight keys stream to one
// partition; key-3 is replayed from its sixth record, each replayed
// record taking 100 ms, while a second member joins (the range splits,
// key-3's part moving, mid-replay). Replays from below the log
// start or above the key's handled position are refused naming the value.
// Afterwards key-3's records were handled in order, each once, with the
// ones from the sixth up to some record run again just before it; every
// other key's once each, in order; the commit reached the end. The same
// with a BatchHandler.
func TestReplayKeyWhileMemberJoins(t *testing.T) {
	t.Run("handler", func(t *testing.T) { testReplayKey(t, false) })
	t.Run("batch", func(t *testing.T) { testReplayKey(t, true) })
}

func testReplayKey(t *testing.T, batch bool) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	var handled handledLog
	h := func(_ context.Context, m *kafka.Message) error {
		if slices.Contains(handled.of(string(m.Key)), int64(m.TopicPartition.Offset)) {
			// A record replayed takes a while, so that the replay
			// spans the second member's join.
			time.Sleep(100 * time.Millisecond)
		}
		handled.add(m)
		return nil
	}
	startMember(t, e.Endpoints, k.Brokers, "m1", h, batchMode(batch, h))
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx := t.Context()
	s := startStream(t, k.Brokers, "orders", 8)
	testutil.WaitFor(t, "key-3 handled", 30*time.Second, func() bool { return len(handled.of("key-3")) >= 20 })
	testutil.WaitFor(t, "a commit past offset 2", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] > 2
	})
	if err := k.DeleteRecords("orders", 0, 2); err != nil {
		t.Fatal(err)
	}
	from := handled.of("key-3")[5]
	q := admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0}
	for _, tc := range []struct {
		from int64
		want string
	}{
		{1, `offset 1 is below the log start of orders/0, 2`},
		{1 << 40, fmt.Sprintf(`offset %d is above the handled position of key "key-3" of "orders"/0`, int64(1<<40))},
		{-1, "--from -1"},
	} {
		if _, err := g.ReplayKey(ctx, admin.ReplayRequest{KeyQuery: q, From: tc.from}); !errors.Is(err, admin.ErrBadKeyQuery) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("replay from %d: got %v, want ErrBadKeyQuery naming %q", tc.from, err, tc.want)
		}
	}
	if n := countKeyOps(t, cli); n != 0 {
		t.Fatalf("%d operations stored after refused replays", n)
	}
	if _, err := g.ReplayKey(ctx, admin.ReplayRequest{KeyQuery: q, From: from, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	startMember(t, e.Endpoints, k.Brokers, "m2", h, batchMode(batch, h))
	testutil.WaitFor(t, "the replay done", 30*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	testutil.WaitFor(t, "the range split with m2", 30*time.Second, func() bool {
		info, err := g.DescribeKey(ctx, admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0, MaxScan: 1})
		return err == nil && info.Range != nil && info.Range.Hi-info.Range.Lo < 1<<32
	})
	time.Sleep(500 * time.Millisecond)
	sent := s.stop(t)
	total := int64(0)
	for _, offs := range sent {
		total += int64(len(offs))
	}
	testutil.WaitFor(t, "the commit at the end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == total
	})
	all, got := sent["key-3"], handled.of("key-3")
	i := slices.Index(all, from)
	j := len(got) - len(all) + i // where the live records resumed after the replay
	t.Logf("key-3: %d records, replayed [%d, %d) of them (offsets from %d)", len(all), i, j, from)
	if j <= i || j > len(all) {
		t.Fatalf("key-3 handled %d times for %d records: want the replay of some records from %d on, once", len(got), len(all), from)
	}
	want := append(append(slices.Clone(all[:j]), all[i:j]...), all[j:]...)
	if !slices.Equal(got, want) {
		t.Errorf("key-3 handled at %v; want %v: its records in order, those from %d to %d again before the next", got, want, all[i], all[j-1])
	}
	for key, offs := range sent {
		if key != "key-3" && !slices.Equal(handled.of(key), offs) {
			t.Errorf("%s handled at %v, want %v", key, handled.of(key), offs)
		}
	}
}

// TestReplayOfDeletedRecords: a key is replayed from a record that is
// deleted before any member reads it (the group stopped; DeleteRecords
// moves the log start past it). The member that runs the replay refuses
// it, in the stored operation (naming the deleted records and where a
// replay can start) and in its log, replays none of what is left (not
// what was asked for), and the key's live records go on.
func TestReplayOfDeletedRecords(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	recs := testutil.KeyedRecords(40, 4)
	offsets := keyOffsets(recs, testutil.Produce(t, k.Brokers, "orders", recs))
	var first handledLog
	stop := startMember(t, e.Endpoints, k.Brokers, "m1", func(_ context.Context, m *kafka.Message) error {
		first.add(m)
		return nil
	})
	testutil.WaitFor(t, "the commit at the end", 30*time.Second, func() bool {
		return testutil.Committed(t, k.Brokers, "g", "orders", 1)[0] == 40
	})
	stop()

	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	from, logStart := offsets["key-3"][1], offsets["key-3"][5]
	q := admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0}
	if _, err := g.ReplayKey(t.Context(), admin.ReplayRequest{KeyQuery: q, From: from, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	if err := k.DeleteRecords("orders", 0, logStart); err != nil {
		t.Fatal(err)
	}

	var logs testutil.Buffer
	var replayed handledLog
	startMember(t, e.Endpoints, k.Brokers, "m2", func(_ context.Context, m *kafka.Message) error {
		replayed.add(m)
		return nil
	}, func(c *consumer.Config) {
		c.Logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	})
	var refused string
	testutil.WaitFor(t, "the replay refused", 30*time.Second, func() bool {
		info, err := g.DescribeKey(t.Context(), q)
		if err != nil || info.Op == nil {
			return false
		}
		refused = info.Op.Refused
		return refused != ""
	})
	wantRange := fmt.Sprintf("records %d to %d of orders/0 were deleted", from, logStart-1)
	if !strings.Contains(refused, wantRange) || !strings.Contains(refused, fmt.Sprintf("replay from %d or later", logStart)) {
		t.Errorf("the replay's refusal %q does not name the deleted records (want %q) and where a replay can start", refused, wantRange)
	}
	want := fmt.Sprintf("deleted_from=%d log_start=%d", from, logStart)
	if !strings.Contains(logs.String(), "the replay is refused") || !strings.Contains(logs.String(), want) {
		t.Errorf("m2's log does not say that records from %d to %d could not be read (want %q):\n%s", from, logStart, want, logs.String())
	}
	if got := replayed.of("key-3"); len(got) != 0 {
		t.Errorf("key-3 replayed at %v; want none: the records asked for are gone", got)
	}
	// The refused replay holds nothing: the key's live records go on.
	live := testutil.Produce(t, k.Brokers, "orders", []testutil.Record{{Key: []byte("key-3"), Value: []byte("live"), Partition: 0}})
	testutil.WaitFor(t, "key-3's live record handled", 30*time.Second, func() bool {
		return slices.Contains(replayed.of("key-3"), int64(live[0].Offset))
	})
	if _, err := g.CancelKeyOp(t.Context(), q); err != nil {
		t.Fatal(err)
	}
}

// TestReplayAfterRangeMoved: a key is replayed on a member that has just
// taken its range over and fetches from the range's watermark, held there
// by a slow key at its in-flight bound, far below the replayed key's
// handled records (done above the watermark by the range's previous
// owner). The replay handles the key's records from the requested offset
// to its last handled one, each once and in order: its bound is what the
// range's ledger counts handled, not the new owner's fetch position.
func TestReplayAfterRangeMoved(t *testing.T) {
	testutil.ParallelOnKfake(t)
	cli, e := testutil.StartEtcd(t)
	k := testutil.StartKafka(t, map[string]int32{"orders": 1})
	recs := append([]testutil.Record{{Key: []byte("slow"), Value: []byte("slow:0")}}, testutil.KeyedRecords(60, 4)...)
	offsets := keyOffsets(recs, testutil.Produce(t, k.Brokers, "orders", recs))
	// slow's record holds the watermark at 0 while every other record is
	// handled; it never finishes.
	blockSlow := func(ctx context.Context, m *kafka.Message) bool {
		if string(m.Key) != "slow" {
			return false
		}
		<-ctx.Done()
		return true
	}
	var first handledLog
	stop := startMember(t, e.Endpoints, k.Brokers, "m1", func(ctx context.Context, m *kafka.Message) error {
		if blockSlow(ctx, m) {
			return ctx.Err()
		}
		first.add(m)
		return nil
	})
	testutil.WaitFor(t, "key-3 handled", 30*time.Second, func() bool { return len(first.of("key-3")) == len(offsets["key-3"]) })
	stop() // the drain gives up on slow's record; the release records the rest done

	var replayed handledLog
	startMember(t, e.Endpoints, k.Brokers, "m2", func(ctx context.Context, m *kafka.Message) error {
		if blockSlow(ctx, m) {
			return ctx.Err()
		}
		replayed.add(m)
		return nil
	}, func(c *consumer.Config) { c.Concurrency, c.MaxInFlight = 1, 1 })
	g, err := admin.Open(cli, kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, "/keyshare", "g")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	q := admin.KeyQuery{Topic: "orders", Key: []byte("key-3"), Partition: 0}
	testutil.WaitFor(t, "m2 owns key-3's range", 30*time.Second, func() bool {
		info, err := g.DescribeKey(t.Context(), q)
		return err == nil && info.Range != nil && info.Range.Owner == "m2" && info.Range.OwnerLive
	})
	from := offsets["key-3"][2]
	if _, err := g.ReplayKey(t.Context(), admin.ReplayRequest{KeyQuery: q, From: from, By: "ops@test"}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the replay done", 30*time.Second, func() bool { return countKeyOps(t, cli) == 0 })
	if got, want := replayed.of("key-3"), offsets["key-3"][2:]; !slices.Equal(got, want) {
		t.Errorf("key-3 replayed at %v; want its handled records from %d on, each once, in order: %v", got, from, want)
	}
}
