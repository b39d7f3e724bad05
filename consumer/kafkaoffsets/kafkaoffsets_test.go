package kafkaoffsets

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/testutil"
)

// TestInChunks: every item is passed once, in runs of at most Chunk, and
// the first error of any run is returned after all have run.
func TestInChunks(t *testing.T) {
	for _, n := range []int{0, 1, Chunk, Chunk + 1, 3*Chunk + 7} {
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		var (
			mu   sync.Mutex
			seen []int
			runs int
		)
		err := InChunks(items, func(c []int) error {
			if len(c) == 0 || len(c) > Chunk {
				t.Errorf("n=%d: a run of %d items", n, len(c))
			}
			mu.Lock()
			seen = append(seen, c...)
			runs++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(seen)
		if !slices.Equal(seen, items) {
			t.Errorf("n=%d: %d items passed, want each of %d once", n, len(seen), n)
		}
		if want := (n + Chunk - 1) / Chunk; runs != want {
			t.Errorf("n=%d: %d runs, want %d", n, runs, want)
		}
	}
	boom := errors.New("boom")
	var mu sync.Mutex
	ran := 0
	err := InChunks(make([]int, 3*Chunk), func(c []int) error {
		mu.Lock()
		ran++
		mu.Unlock()
		return boom
	})
	if !errors.Is(err, boom) || ran != 3 {
		t.Errorf("error %v after %d runs; want boom after all 3", err, ran)
	}
}

// BenchmarkOffsets reads the committed and end offsets of 4,096 partitions
// from kfake, in one request and in requests of Chunk sent at once: the
// figures behind Chunk.
//
//	go test -run '^$' -bench Offsets ./consumer/kafkaoffsets/
func BenchmarkOffsets(b *testing.B) {
	const n = 4096
	k := testutil.StartKafka(b, map[string]int32{"wide": n})
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "bench", "log_level": 3})
	if err != nil {
		b.Fatal(err)
	}
	defer kc.Close()
	a, err := kafka.NewAdminClientFromConsumer(kc)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	parts := make([]assign.TopicPartition, n)
	for i := range parts {
		parts[i] = assign.TopicPartition{Topic: "wide", Partition: int32(i)}
	}
	all := Partitions(parts)
	// The group's offsets exist: a group that never committed is answered
	// at once.
	commit := slices.Clone(all)
	for i := range commit {
		commit[i].Offset = 0
	}
	if err := InChunks(commit, func(c []kafka.TopicPartition) error { _, err := kc.CommitOffsets(c); return err }); err != nil {
		b.Fatal(err)
	}
	b.Run("committed/one-request", func(b *testing.B) {
		for b.Loop() {
			if _, err := kc.Committed(all, 60000); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("committed/chunks", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := Committed(kc, parts, 60000); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ends/one-request", func(b *testing.B) {
		ask := make(map[kafka.TopicPartition]kafka.OffsetSpec, n)
		for _, p := range all {
			ask[p] = kafka.LatestOffsetSpec
		}
		for b.Loop() {
			if _, err := a.ListOffsets(b.Context(), ask); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ends/chunks", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := List(b.Context(), a, parts, kafka.LatestOffsetSpec, kafka.IsolationLevelReadUncommitted); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFirstRefused names the first refused partition in topic and
// partition order, with the broker's error.
func TestFirstRefused(t *testing.T) {
	if err := FirstRefused(nil); err != nil {
		t.Fatalf("no refusal: %v", err)
	}
	notLeader := kafka.NewError(kafka.ErrNotLeaderForPartition, "not leader", false)
	refused := map[assign.TopicPartition]error{
		{Topic: "b", Partition: 0}:  errors.New("other"),
		{Topic: "a", Partition: 12}: errors.New("later"),
		{Topic: "a", Partition: 3}:  notLeader,
	}
	err := FirstRefused(refused)
	var kerr kafka.Error
	if err == nil || err.Error() != "a/3: not leader" || !errors.As(err, &kerr) || kerr.Code() != kafka.ErrNotLeaderForPartition {
		t.Fatalf("FirstRefused = %v; want a/3 with the broker's error", err)
	}
}
