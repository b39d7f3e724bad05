package statestore

import (
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// TestRestoreSeeingLaterOwnerIsNoCopy: a grant whose restore reads a
// change made under a later token (the member restoring for a record of a
// range it has lost) makes no copy: the later owner, not this member,
// repairs that key, and a copy would not know the key's last record lost.
func TestRestoreSeeingLaterOwnerIsNoCopy(t *testing.T) {
	topic := DefaultChangelog("g", "events")
	k := testutil.StartKafka(t, map[string]int32{topic: 1})
	g := &group{t: t, brokers: k.Brokers, name: "g", topic: "events"}
	g.appendRaw(keystate.Entry{Key: []byte("k"), Value: []byte("later owner's"), Applied: 50, Fence: 10})
	g.appendRaw(keystate.Entry{Key: []byte("k"), Value: []byte("stale"), Applied: 40, Fence: 8})
	for _, tc := range []struct {
		token   int64
		spoiled bool
	}{{9, true}, {11, false}} {
		s := benchDiskStore(t, k.Brokers, topic)
		p, err := newAppender(s.cfg.Kafka, s.log) // under token 11 the restore repairs k
		if err != nil {
			t.Fatal(err)
		}
		s.producer = p
		gr := benchGrant(tc.token)
		if err := s.restoreTable(t.Context(), gr, nil); err != nil {
			t.Fatal(err)
		}
		p.Close()
		gr.progress.done.Store(true)
		s.mu.Lock()
		s.keepCopyLocked(gr)
		kept := len(s.copies)
		s.mu.Unlock()
		if gr.spoiled != tc.spoiled || (kept == 0) != tc.spoiled {
			t.Errorf("restore under token %d, the changelog holding a change under 10: spoiled %v, %d copies kept; want spoiled %v", tc.token, gr.spoiled, kept, tc.spoiled)
		}
		s.disk.close()
	}
}

// TestCopyPastTheChangelogsEnd: a copy read to an offset past the
// changelog's end (the topic recreated, or truncated) is refused, not
// taken as current.
func TestCopyPastTheChangelogsEnd(t *testing.T) {
	topic := DefaultChangelog("g", "events")
	k := testutil.StartKafka(t, map[string]int32{topic: 1})
	s := benchDiskStore(t, k.Brokers, topic)
	defer s.disk.close()
	s.copies = []*copyRange{{pk: partitionKey{"events", 0}, rng: ledger.Full, through: 100, at: time.Now()}}
	gr := benchGrant(2)
	gr.parts = s.takeCopiesLocked(gr)
	err := s.restoreTable(t.Context(), gr, nil)
	if err == nil || !strings.Contains(err.Error(), "recreated or truncated") {
		t.Fatalf("restore from a copy read to 100 of a changelog that ends at 0: %v", err)
	}
}

// TestCopyMaxAgeBelowRetention: with the state on disk, New refuses a
// changelog that keeps tombstones no longer than CopyMaxAge, and creates
// a changelog with a delete.retention.ms above it.
func TestCopyMaxAgeBelowRetention(t *testing.T) {
	k := testutil.StartKafka(t, map[string]int32{"events": 1, "other": 1})
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	res, err := a.CreateTopics(t.Context(), []kafka.TopicSpecification{{Topic: DefaultChangelog("g", "events"), NumPartitions: 1, ReplicationFactor: 1,
		Config: map[string]string{"cleanup.policy": "compact", "delete.retention.ms": "600000"}}})
	if err != nil || res[0].Error.Code() != kafka.ErrNoError {
		t.Fatalf("create the changelog: %v %v", err, res)
	}
	cfg := Config{Group: "g", Topics: []string{"events"}, Kafka: kafka.ConfigMap{"bootstrap.servers": k.Brokers, "log_level": 3}, Logger: testutil.Logger(t)}
	if s, err := New(t.Context(), cfg); err != nil {
		t.Fatalf("in memory, a changelog keeping tombstones 10 minutes: %v", err)
	} else {
		s.Close()
	}
	cfg.Dir = t.TempDir()
	if _, err := New(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "not longer than CopyMaxAge 1h0m0s") {
		t.Fatalf("on disk, a changelog keeping tombstones 10 minutes: %v", err)
	}
	cfg.CopyMaxAge = 5 * time.Minute
	if s, err := New(t.Context(), cfg); err != nil {
		t.Fatalf("on disk, CopyMaxAge 5m: %v", err)
	} else {
		s.Close()
	}

	cfg.Topics, cfg.CopyMaxAge, cfg.Dir = []string{"other"}, 0, t.TempDir()
	s, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	desc, err := a.DescribeConfigs(t.Context(), []kafka.ConfigResource{{Type: kafka.ResourceTopic, Name: DefaultChangelog("g", "other")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := desc[0].Config["delete.retention.ms"].Value; got != "86400000" {
		t.Errorf("a changelog created for the disk store keeps tombstones %q ms, want 86400000", got)
	}
}
