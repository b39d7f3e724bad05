package consumer

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/kafkaoffsets"
	"github.com/keyshare/keyshare/testutil"
)

// TestOffsetsInChunks: committing and reading the offsets of more
// partitions than one request carries (kafkaoffsets.Chunk), and reading their end
// offsets, commits and reads every one of them, over real requests to the
// broker.
func TestOffsetsInChunks(t *testing.T) {
	const n = 2*kafkaoffsets.Chunk + 88
	k := testutil.StartKafka(t, map[string]int32{"wide": n})
	kc, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "chunks", "log_level": 3})
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ko := &kafkaOffsets{kc: kc, log: hclog.NewNullLogger(), group: "chunks"}
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
		if o != -1 {
			t.Fatalf("%v: committed %d before any commit", p, o)
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
	for p, want := range offsets {
		if got[p] != want {
			t.Errorf("%v: committed %d, want %d", p, got[p], want)
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
