package kafkaoffsets

import (
	"errors"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/testutil"
)

// TestDelete: Delete removes the group's offsets of the partitions it
// names and leaves the others; a partition the broker refuses comes back
// in refused with the broker's error.
func TestDelete(t *testing.T) {
	k := testutil.StartKafka(t, map[string]int32{"t": 4})
	cm := kafka.ConfigMap{"bootstrap.servers": k.Brokers, "group.id": "g", "log_level": 3, "go.logs.channel.enable": false}
	kc, err := kafka.NewConsumer(&cm)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	parts := []assign.TopicPartition{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "t", Partition: 2}, {Topic: "t", Partition: 3}}
	commit := Partitions(parts)
	for i := range commit {
		commit[i].Offset = kafka.Offset(10 + i)
	}
	if _, err := kc.CommitOffsets(commit); err != nil {
		t.Fatal(err)
	}
	refused, err := Delete(t.Context(), cm, "g", parts[2:])
	if err != nil || len(refused) != 0 {
		t.Fatalf("delete t/2 and t/3: refused %v, error %v", refused, err)
	}
	got, _, err := Committed(kc, parts, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[int32]int64{0: 10, 1: 11, 2: -1, 3: -1} {
		if o := got[assign.TopicPartition{Topic: "t", Partition: p}]; o != want {
			t.Errorf("t/%d: committed %d after the delete, want %d", p, o, want)
		}
	}

	// A broker that refuses a partition (as it does a topic a live
	// member of a plain group is subscribed to).
	fake := k.Fake(t)
	fake.ControlKey(kmsg.OffsetDelete.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetDeleteRequest)
		resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetDeleteResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetDeleteResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.GroupSubscribedToTopic.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	refused, err = Delete(t.Context(), cm, "g", parts[:1])
	var kafkaErr kafka.Error
	if err != nil || len(refused) != 1 {
		t.Fatalf("refused delete: refused %v, error %v; want t/0 refused", refused, err)
	}
	if e := refused[parts[0]]; e == nil || !errors.As(e, &kafkaErr) || kafkaErr.Code() != kafka.ErrGroupSubscribedToTopic {
		t.Fatalf("t/0 refused with %v, want the broker's GROUP_SUBSCRIBED_TO_TOPIC", e)
	}
}
