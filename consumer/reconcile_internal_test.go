package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyshare/keyshare/ledger"
	"github.com/keyshare/keyshare/schema"
	"github.com/keyshare/keyshare/testutil"
)

// holdRequests makes the kfake broker hold every request of kind key
// without answering (other connections go on) until the returned function
// is called; held is closed when the first one arrives. The test's cleanup
// lets them go too.
func holdRequests(t *testing.T, fake *kfake.Cluster, key kmsg.Key) (held <-chan struct{}, letGo func()) {
	t.Helper()
	arrived, release := make(chan struct{}), make(chan struct{})
	var arrivedOnce, releaseOnce sync.Once
	letGo = func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(letGo)
	fake.ControlKey(key.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		select {
		case <-release:
			return nil, nil, false // answered as usual
		default:
		}
		arrivedOnce.Do(func() { close(arrived) })
		fake.SleepControl(func() { <-release })
		return nil, nil, false
	})
	return arrived, letGo
}

// starts records when each record of a partition started, per partition.
type starts struct {
	mu sync.Mutex
	at map[int32][]time.Time
}

func (s *starts) add(p int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at == nil {
		s.at = make(map[int32][]time.Time)
	}
	s.at[p] = append(s.at[p], time.Now())
}

// after counts the starts in partition p after t.
func (s *starts) after(p int32, t time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, at := range s.at[p] {
		if at.After(t) {
			n++
		}
	}
	return n
}

// initialized is a ledger entry of the full range with next at offset next.
func initialized(next int64) *ledger.Entry {
	return &ledger.Entry{Segments: []ledger.Segment{{Lo: 0, Hi: ledger.HashSpace, Next: next}}}
}

// waitFetched waits until the member has taken every record below end of
// partition 0 from its fetcher.
func waitFetched(t *testing.T, r *rig, end int64) {
	t.Helper()
	testutil.WaitFor(t, "the records fetched", 30*time.Second, func() bool {
		r.p.mu.Lock()
		defer r.p.mu.Unlock()
		return r.p.mu.pos[tp{Topic: rigTopic}] >= end
	})
}

// TestRevokeNotHeldByStartOffsetRead: a member runs a long backlog of one
// key in range X (partition 0) when it is given a new range Y (partition 1)
// with no ledger state, whose start offset it must read from Kafka; the
// group coordinator does not answer that OffsetFetch (it is loading, say).
// Meanwhile the leader (the test) revokes X and, as coord's leader does,
// hands it on once it is released or its drain budget plus max(1 s, TTL)
// has passed. The member must apply the revoke while its read is
// unanswered: no record of X may start after the range was handed on (the
// new owner may run the key by then), and the release must not wait for
// the read. Y starts once the read is answered.
func TestRevokeNotHeldByStartOffsetRead(t *testing.T) {
	testutil.ParallelOnKfake(t)
	var st starts
	h := func(ctx context.Context, m *kafka.Message) error {
		st.add(m.TopicPartition.Partition)
		select {
		case <-time.After(50 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r := newRigWith(t, h, true, rigOptions{partitions: 2})
	fake := r.k.Fake(t)
	held, letGo := holdRequests(t, fake, kmsg.OffsetFetch)

	r.put(r.full(schema.StateActive), initialized(0)) // X, with state: no offset to read
	const backlog = 80                                // 4 s of key k at 50 ms a record
	recs := make([]testutil.Record, backlog)
	for i := range recs {
		recs[i] = testutil.Record{Key: []byte("k"), Value: []byte("v")}
	}
	testutil.Produce(t, r.k.Brokers, rigTopic, recs)
	waitFetched(t, r, backlog)

	y := r.full(schema.StateActive)
	y.Partition = 1
	r.put(y, nil) // Y, without state: its start is read from Kafka
	wait(t, "the member's OffsetFetch for the new range", held)

	const budget = 300 * time.Millisecond
	rev := r.full(schema.StateRevoking)
	rev.Target, rev.DrainMs = "other", budget.Milliseconds()
	r.put(rev, nil)
	handOnBy := time.Now().Add(budget + max(time.Second, r.c.cfg.SessionTTL))
	released := false
	for time.Now().Before(handOnBy) && !released {
		released = r.stored().Record.State == schema.StateReleased
		time.Sleep(20 * time.Millisecond)
	}
	moved := r.full(schema.StateActive)
	moved.Owner = "other"
	r.put(moved, nil)
	handedOn := time.Now()
	// The read stays unanswered a little longer: a record of X the member
	// starts now runs beside the new owner.
	time.Sleep(500 * time.Millisecond)
	letGo()
	testutil.WaitFor(t, "the new range started", 20*time.Second, func() bool {
		r.p.mu.Lock()
		defer r.p.mu.Unlock()
		return r.p.mu.ranges[r.schema.Range(rigTopic, 1, 0)] != nil
	})

	if !released {
		t.Errorf("range not released within its drain budget plus grace while the member's OffsetFetch was unanswered: the revoke waited behind it")
	}
	if n := st.after(0, handedOn); n > 0 {
		t.Errorf("%d records of the revoked range started after the leader handed it on", n)
	}
}

// TestRevokeNotHeldByRetention: the member looks for records deleted from
// the log (as after an offset-out-of-range error) and the broker does not
// answer its log-offset queries. A revoke arriving meanwhile must be
// applied at once: the range is drained and released while the queries
// are unanswered.
func TestRevokeNotHeldByRetention(t *testing.T) {
	testutil.ParallelOnKfake(t)
	h := func(ctx context.Context, m *kafka.Message) error {
		select {
		case <-time.After(50 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	r := newRig(t, h, true, nil)
	fake := r.k.Fake(t)
	r.put(r.full(schema.StateActive), initialized(0))
	testutil.Produce(t, r.k.Brokers, rigTopic, testutil.KeyedRecords(40, 1))
	waitFetched(t, r, 40)

	held, letGo := holdRequests(t, fake, kmsg.ListOffsets)
	poke(r.p.retentionCh)
	wait(t, "the member's log-offset query", held)

	rev := r.full(schema.StateRevoking)
	rev.Target, rev.DrainMs = "other", 300
	r.put(rev, nil)
	handOnBy := time.Now().Add(300*time.Millisecond + max(time.Second, r.c.cfg.SessionTTL))
	released := false
	for time.Now().Before(handOnBy) && !released {
		released = r.stored().Record.State == schema.StateReleased
		time.Sleep(20 * time.Millisecond)
	}
	letGo()
	if !released {
		t.Fatalf("range not released within its drain budget plus grace while the member's log-offset query was unanswered: the revoke waited behind it")
	}
}
