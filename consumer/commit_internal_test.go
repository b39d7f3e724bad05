package consumer

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/consumer/kafkaoffsets"
	"github.com/keyshare/keyshare/coord"
	"github.com/keyshare/keyshare/testutil"
)

// TestOffsetsInChunks: committing and reading the offsets of more
// partitions than one request carries (kafkaoffsets.Chunk), and reading their end
// offsets, commits and reads every one of them, with the committing
// member's mark, over real requests to the broker.
func TestOffsetsInChunks(t *testing.T) {
	const n = 2*kafkaoffsets.Chunk + 88
	k := testutil.StartKafka(t, map[string]int32{"wide": n})
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "chunks", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ko := &kafkaOffsets{kc: kc, log: hclog.NewNullLogger(), group: "chunks", member: "m"}
	parts := make([]tp, n)
	offsets := make(map[tp]int64, n)
	for i := range parts {
		parts[i] = tp{Topic: "wide", Partition: int32(i)}
		offsets[parts[i]] = int64(i + 1)
	}
	got, err := ko.Committed(t.Context(), parts)
	if err != nil || len(got) != n {
		t.Fatalf("before any commit: %d offsets read, error %v; want all %d", len(got), err, n)
	}
	for p, o := range got {
		if o.Offset != -1 || o.By != "" {
			t.Fatalf("%v: committed %+v before any commit", p, o)
		}
	}
	failed, err := ko.Commit(t.Context(), offsets)
	if err != nil || len(failed) > 0 {
		t.Fatalf("commit: failed %v, error %v", failed, err)
	}
	got, err = ko.Committed(t.Context(), parts)
	if err != nil || len(got) != n {
		t.Fatalf("%d offsets read, error %v; want all %d", len(got), err, n)
	}
	// Each commit carries the member's mark, and reads back with it.
	for p, want := range offsets {
		if got[p] != (coord.KafkaOffset{Offset: want, By: "m"}) {
			t.Errorf("%v: committed %+v, want %d by m", p, got[p], want)
		}
	}

	// End offsets: partition i holds i % 3 records. This consumer fetches
	// none of them, so every one is asked of the broker.
	var records []testutil.Record
	for i := range parts {
		for range i % 3 {
			records = append(records, testutil.Record{Partition: int32(i), Value: []byte("v")})
		}
	}
	testutil.Produce(t, k.Brokers, "wide", records)
	ends, err := ko.Ends(t.Context(), parts)
	if err != nil || len(ends) != n {
		t.Fatalf("%d end offsets read, error %v; want all %d", len(ends), err, n)
	}
	for i, p := range parts {
		if want := int64(i % 3); ends[p] != want {
			t.Errorf("%v: end offset %d, want %d", p, ends[p], want)
		}
	}
}

// TestEndsLeavesOutFreshlyFetched: Ends does not ask the broker for a
// partition this member fetches whose end librdkafka has not cached yet (a
// range just taken over: its first fetch brings the end); it does ask for
// the partitions it does not fetch, and the next call asks for a fetched
// one whose end is still not cached.
func TestEndsLeavesOutFreshlyFetched(t *testing.T) {
	k := testutil.StartKafka(t, map[string]int32{"t": 4})
	testutil.Produce(t, k.Brokers, "t", []testutil.Record{{Partition: 0, Value: []byte("v")}, {Partition: 1, Value: []byte("v")}})
	// Assigned at the group's committed offset, which it has none of, with
	// auto.offset.reset=error (as keyshare's consumer): librdkafka never
	// fetches them, so no end is ever cached.
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "ends", "auto.offset.reset": "error", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	topic := "t"
	if err := kc.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: 0, Offset: kafka.OffsetStored}, {Topic: &topic, Partition: 2, Offset: kafka.OffsetStored}}); err != nil {
		t.Fatal(err)
	}
	ko := &kafkaOffsets{kc: kc, log: hclog.NewNullLogger(), group: "ends"}
	parts := []tp{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "t", Partition: 2}, {Topic: "t", Partition: 3}}
	ends, err := ko.Ends(t.Context(), parts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[tp]int64{{Topic: "t", Partition: 1}: 1, {Topic: "t", Partition: 3}: 0}
	if len(ends) != len(want) {
		t.Fatalf("ends %v, want %v (the fetched partitions left out)", ends, want)
	}
	for p, e := range want {
		if ends[p] != e {
			t.Errorf("%v: end %d, want %d", p, ends[p], e)
		}
	}
	ends, err = ko.Ends(t.Context(), parts)
	if err != nil || len(ends) != len(parts) || ends[tp{Topic: "t", Partition: 0}] != 1 || ends[tp{Topic: "t", Partition: 2}] != 0 {
		t.Fatalf("second call: ends %v, error %v; want every partition's end", ends, err)
	}
}

// TestUnknownEndKeepsLast: a commit round that could not learn a
// partition's end offset leaves its gauges at the last end known, not at
// -1 (a negative lag).
func TestUnknownEndKeepsLast(t *testing.T) {
	c := &Consumer{}
	p := tp{Topic: "t", Partition: 0}
	c.onCommitRound(coord.CommitRound{Partitions: map[tp]coord.PartitionOffsets{p: {End: 10, Safe: 7, Committed: 7}}})
	c.onCommitRound(coord.CommitRound{Partitions: map[tp]coord.PartitionOffsets{p: {End: -1, Safe: 8, Committed: 8}}})
	if g := c.mu.partitions[p]; g.end != 10 || g.safe != 8 || g.committed != 8 {
		t.Fatalf("gauges %+v, want end 10 (the last known), safe and committed 8", g)
	}
}
