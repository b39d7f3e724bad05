package statestore

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/testutil"
)

// TestRestoreSeeingLaterOwnerCopiesTheRest: a grant whose restore reads a
// change of key k made under a later token (the member restoring for a
// record of a range it has lost) keeps no copy of k: the later owner, not
// this member, repairs k, and a copy would not know k's last record lost.
// The rest of its range is a copy, and so is a range the change is outside
// of: a restore reads the whole changelog partition, other ranges' later
// owners included.
func TestRestoreSeeingLaterOwnerCopiesTheRest(t *testing.T) {
	topic := DefaultChangelog("g", "events")
	k := testutil.StartKafka(t, map[string]int32{topic: 1})
	g := &group{t: t, brokers: k.Brokers, name: "g", topic: "events"}
	key := keyIn(upper, 1)
	h := uint64(ledger.Hash(key, 0))
	g.appendRaw(keystate.Entry{Key: key, Value: []byte("later owner's"), Applied: 50, Fence: 10})
	g.appendRaw(keystate.Entry{Key: key, Value: []byte("stale"), Applied: 40, Fence: 8})
	beside := []ledger.HashRange{{Lo: 0, Hi: h}, {Lo: h + 1, Hi: ledger.HashSpace}}
	// followed is a later owner's change of another key the follower
	// passes the grant after its restore.
	followed := keystate.Entry{Key: keyIn(lower, 2), Value: []byte("later owner's"), Applied: 60, Fence: 12}
	fh := uint64(ledger.Hash(followed.Key, 0))
	for _, tc := range []struct {
		name   string
		rng    ledger.HashRange
		token  int64
		follow bool
		copies []ledger.HashRange // what the member keeps as copies
	}{
		{"the change in range, under a later token", ledger.Full, 9, false, beside},
		{"the change outside the range", lower, 9, false, []ledger.HashRange{lower}},
		{"the change under an earlier token", ledger.Full, 11, false, []ledger.HashRange{ledger.Full}},
		{"and a later owner's change followed", ledger.Full, 11, true, []ledger.HashRange{{Lo: 0, Hi: fh}, {Lo: fh + 1, Hi: ledger.HashSpace}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := benchDiskStore(t, k.Brokers, topic)
			defer s.disk.close()
			p, err := newAppender(s.cfg.Kafka, s.log) // under token 11 the restore repairs the key
			if err != nil {
				t.Fatal(err)
			}
			s.producer = p
			gr := benchGrant(tc.token)
			gr.rng = tc.rng
			err = s.restoreTable(t.Context(), gr, nil)
			if err == nil && tc.follow {
				s.observe(t.Context(), []*grant{gr}, gr.from, followed)
			}
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			gr.progress.done.Store(true)
			s.mu.Lock()
			s.keepCopyLocked(gr)
			s.mu.Unlock()
			s.settleCopies(gr)
			var got []ledger.HashRange
			for _, c := range s.copies {
				got = append(got, c.rng)
			}
			if !slices.Equal(got, tc.copies) {
				t.Errorf("restore of %s under token %d, the changelog holding a change of a key at hash %d under 10: copies %v, want %v", tc.rng, tc.token, h, got, tc.copies)
			}
		})
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
