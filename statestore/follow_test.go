package statestore

import (
	"strconv"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/testutil"
)

// TestLateChangeRepaired: a member that lost a range appends a change of a
// key after the range's owner restored it (an append that was on its
// way): behind the owner (a lower applied offset) and under an older
// token. It is now the key's last record, the only one compaction keeps.
// The owner, following the changelog, appends the key's state again, so
// that the last record of every key is its true count. With the follower
// off, the late change stays the key's last record: the compacted log
// would restore a count of 1.
func TestLateChangeRepaired(t *testing.T) {
	for _, tc := range []struct {
		name   string
		follow bool
	}{{"follower", true}, {"follower off", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.follow {
				followChangelog = false
				t.Cleanup(func() { followChangelog = true })
			}
			testLateChangeRepaired(t, tc.follow)
		})
	}
}

func testLateChangeRepaired(t *testing.T, follow bool) {
	g := newGroup(t, 1)
	a := g.start("a", count, nil)
	recs := testutil.KeyedRecords(100, 5)
	g.waitCommitted(testutil.Produce(t, g.brokers, g.topic, recs))

	late := keystate.Entry{Key: []byte("key-1"), Value: []byte("1"), Applied: 1, Fence: 1}
	g.appendRaw(late)
	if follow {
		testutil.WaitFor(t, "the late change repaired", 20*time.Second, func() bool { return a.store.Stats().Repairs == 1 })
	}
	a.stop(t)
	got, exp := g.lastRecords(), want(recs)
	switch {
	case !follow && got["key-1"] == exp["key-1"]:
		t.Fatal("with the follower off the last record of key-1 still holds its true count: the late change did not land last, and the test proves nothing")
	case !follow:
		t.Logf("follower off: the last record of key-1 holds count %d, its records %d", got["key-1"], exp["key-1"])
	case got["key-1"] != exp["key-1"]:
		t.Fatalf("the last record of key-1 holds count %d, want %d: compaction would keep the late change", got["key-1"], exp["key-1"])
	}
}

// appendRaw appends e to the group's changelog partition 0 as a member
// would.
func (g *group) appendRaw(e keystate.Entry) {
	g.t.Helper()
	topic := DefaultChangelog(g.name, g.topic)
	msg := EntryMessage(topic, 0, e)
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": g.brokers, "log_level": 3})
	if err != nil {
		g.t.Fatal(err)
	}
	defer p.Close()
	report := make(chan kafka.Event, 1)
	if err := p.Produce(msg, report); err != nil {
		g.t.Fatal(err)
	}
	if m := (<-report).(*kafka.Message); m.TopicPartition.Error != nil {
		g.t.Fatal(m.TopicPartition.Error)
	}
}

// lastRecords is each key's count in its last changelog record: what a
// compacted changelog keeps.
func (g *group) lastRecords() map[string]int {
	g.t.Helper()
	s := &Store{cfg: Config{Kafka: g.kafka()}.withDefaults(), log: testutil.Logger(g.t)}
	out := make(map[string]int)
	var pr restoreProgress
	err := s.readChangelog(g.t.Context(), DefaultChangelog(g.name, g.topic), 0, &pr, func(e keystate.Entry) error {
		n, err := strconv.Atoi(string(e.Value))
		if err != nil {
			g.t.Fatalf("key %q: state %q is no count", e.Key, e.Value)
		}
		out[string(e.Key)] = n
		return nil
	})
	if err != nil {
		g.t.Fatal(err)
	}
	return out
}
