package consumer

import (
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// logEnds is a fetcher that knows only each partition's log end, as
// librdkafka's last fetch answer for it said: what sharesLocked reads.
type logEnds struct {
	fetcher
	high map[int32]int64 // absent: no fetch answer yet
}

func (f logEnds) GetWatermarkOffsets(_ string, partition int32) (int64, int64, error) {
	if h, ok := f.high[partition]; ok {
		return 0, h, nil
	}
	return int64(kafka.OffsetInvalid), int64(kafka.OffsetInvalid), nil // librdkafka's answer before the first fetch
}

// TestSharesSqueezeOnlyForAKnownBacklog: partition 0 holds every slot of
// the in-flight bound, and partitions 1 and 2 hold none. Partition 0 is
// paused to its share only when another partition is known to have
// records to fetch: not when the others are at their log end, and not
// before librdkafka has heard a partition's log end at all. A partition
// whose first fetch has not been answered yet has sent no records either,
// and the next check, 10 ms on, sees its answer; pausing for it drops
// what librdkafka fetched for the busy partition for nothing.
func TestSharesSqueezeOnlyForAKnownBacklog(t *testing.T) {
	const limit = 60
	cases := []struct {
		name      string
		high      map[int32]int64 // partitions 1 and 2; each is fetched from offset 0
		wantPause bool
	}{
		{"log ends not known yet", map[int32]int64{}, false},
		{"one log end not known yet", map[int32]int64{1: 0}, false},
		{"both at their log end", map[int32]int64{1: 0, 2: 0}, false},
		{"records waiting on one", map[int32]int64{1: 0, 2: 5}, true},
		{"records waiting, the other not known", map[int32]int64{1: 5}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &pipeline{kc: logEnds{high: tc.high}}
			p.mu.rangeTable = newRangeTable()
			p.mu.jobs = make(map[tp]*jobList)
			for part := range int32(3) {
				pt := tp{Topic: "orders", Partition: part}
				p.mu.assigned[pt], p.mu.pos[pt] = true, 0
			}
			busy := new(jobList)
			for o := range int64(limit) {
				busy.push(&job{o: o})
			}
			p.mu.jobs[tp{Topic: "orders", Partition: 0}] = busy
			pause, resume := p.sharesLocked(limit, limit)
			if len(resume) > 0 {
				t.Errorf("resumed %v; none was paused", resume)
			}
			switch {
			case tc.wantPause && (len(pause) != 1 || pause[0].Partition != 0):
				t.Errorf("paused %v; want partition 0 alone, held to its share for the partition with records waiting", pause)
			case !tc.wantPause && len(pause) > 0:
				t.Errorf("paused %v; want none: no other partition is known to have records to fetch", pause)
			}
		})
	}
}
