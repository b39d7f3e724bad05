package coord

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/schema"
)

// A topic deleted and created again under the same name is a new log: its
// offsets start again at 0 and hold other records. The group's ledger and
// commit records of the old topic must never be applied to it — a range
// whose next is 100 would pass over the new log's first 100 records as
// done. Kafka gives every topic an id (KIP-516); the leader keeps the id the
// group's state belongs to in topics/<topic> and, when Kafka reports another
// one, starts the topic afresh:
//
//  1. in one guarded transaction it deletes the topic's range records,
//     ledger entries and commit records and marks the topic "resetting"
//     (owners are fenced: their range records are gone);
//  2. it sets the group's committed Kafka offsets of the topic to where a
//     new group would start (auto.offset.reset), and deletes those of
//     partitions the new topic does not have — Apache Kafka drops a
//     deleted topic's offsets, not every broker does — and again once
//     resetSettle has passed, since a commit round that read the group
//     before step 1 may still commit an old offset;
//  3. it marks the topic "active"; the next assignment round gives its
//     partitions new ranges with no ledger state, which start at the
//     committed offset of step 2 — where a Kafka consumer group starts on a
//     recreated topic.
//
// A topic's partitions are not assigned while it is resetting.
//
// Wiping a topic's state on etcd's word alone would let a damaged or
// forged topics/<topic> record make the group run the whole topic again
// (or, with auto.offset.reset=latest, skip what it had not handled). So the
// leader believes a recreation only on Kafka's word: the new id read twice,
// in two partition reads apart, and either this leader saw Kafka report the
// recorded id earlier in its term, or Kafka holds no committed offset of
// the group for the topic (a broker drops a deleted topic's offsets). A
// mismatch Kafka does not confirm is a damaged record: it is logged once
// and rewritten with Kafka's id, and the group's state is kept.

// resetSettle is how long after deleting a recreated topic's state the
// leader resets its Kafka offsets again before assigning it afresh: longer
// than a commit round that read the group before the reset can take (its
// etcd requests are bounded by the consumer's EtcdTimeout, 2 s by default).
const resetSettle = 5 * time.Second

// topicWatch is the leader's memory of topic ids and resets during one
// term.
type topicWatch struct {
	resetAt map[string]time.Time // when this leader deleted a topic's state (its monotonic clock)
	held    map[string]bool      // topics not to assign now
	changed bool                 // held changed since the last plan
	// saw is, per topic, every id Kafka reported in this term.
	saw map[string]map[string]bool
	// newID is, per topic, an id Kafka reports that differs from the
	// record, with the time of the partition read that first reported it.
	newID map[string]idRead
	// refused is, per topic, the mismatch (record id, Kafka id) that
	// Kafka did not confirm, as last reported.
	refused map[string][2]string
}

type idRead struct {
	id string
	at time.Time
}

func newTopicWatch() *topicWatch {
	return &topicWatch{resetAt: make(map[string]time.Time), held: make(map[string]bool),
		saw: make(map[string]map[string]bool), newID: make(map[string]idRead), refused: make(map[string][2]string)}
}

// recreated says whether Kafka confirms that topic, recorded as the
// topic with id recorded, is a new topic with id kafka: see above. readAt
// is when the partition read that reported kafka was made. ok is false
// while it cannot tell yet (the first read of the new id, or Kafka's
// offsets unreadable).
func (s *Session) recreated(ctx context.Context, tw *topicWatch, topic, recorded, kafka string, readAt time.Time) (recreated, ok bool) {
	if n, seen := tw.newID[topic]; !seen || n.id != kafka {
		tw.newID[topic] = idRead{id: kafka, at: readAt}
		return false, false
	} else if !readAt.After(n.at) {
		return false, false // the same read: wait for the next
	}
	if tw.saw[topic][recorded] {
		return true, true
	}
	has, err := s.cfg.TopicIDs.HasOffsets(ctx, topic)
	if err != nil {
		s.log.Warn("read the group's Kafka offsets of a topic whose id changed; trying again next round", "topic", topic, "error", err)
		return false, false
	}
	return !has, true
}

// checkTopics compares Kafka's topic ids (the reader's last, topicread.go;
// nil if it has none) with the group's and starts recreated topics afresh
// (see above). It updates tw.held. Errors are logged; what did not happen
// is tried again next call.
func (s *Session) checkTopics(ctx context.Context, l *leader, tw *topicWatch, ids map[string]string, readAt time.Time) {
	if ids == nil {
		return
	}
	recs, err := s.readTopicRecords(ctx)
	if err != nil {
		s.log.Warn("read topic records", "error", err)
		return
	}
	for _, topic := range s.cfg.Topics {
		id := ids[topic]
		rec, known := recs.stored[topic]
		if id != "" {
			if tw.saw[topic] == nil {
				tw.saw[topic] = make(map[string]bool)
			}
			tw.saw[topic][id] = true
		}
		switch {
		case id == "":
			// Kafka does not say now (the topic is gone, or not yet
			// back): leave everything as it is.
		case !known:
			s.putTopic(ctx, l, recs, topic, id, schema.TopicActive)
		case rec.ID != id:
			s.topicIDChanged(ctx, l, tw, recs, topic, rec.ID, id, readAt)
		case rec.State == schema.TopicResetting:
			s.settleTopicReset(ctx, l, tw, recs, topic, id)
		default:
			delete(tw.held, topic)
			delete(tw.newID, topic) // a later difference is read twice again
		}
	}
}

// topicRecords is the group's topic records by topic, and the ModRevision
// of each topic key (damaged ones included, so they can be rewritten).
type topicRecords struct {
	stored map[string]schema.TopicRecord
	revs   map[string]int64
}

func (s *Session) readTopicRecords(ctx context.Context) (topicRecords, error) {
	recs := topicRecords{stored: make(map[string]schema.TopicRecord), revs: make(map[string]int64)}
	resp, err := s.cli.Get(ctx, s.schema.Topics(), clientv3.WithPrefix())
	if err != nil {
		return recs, err
	}
	for _, kv := range resp.Kvs {
		r, err := schema.DecodeTopic(string(kv.Key), kv.Value)
		if err != nil || s.schema.Topic(r.Topic) != string(kv.Key) {
			// Rewritten by checkTopics with the id Kafka reports now.
			s.log.Error("damaged topic record; recording the topic's current id", "key", string(kv.Key), "error", err)
			recs.revs[string(kv.Key)] = kv.ModRevision
			continue
		}
		recs.stored[r.Topic], recs.revs[string(kv.Key)] = r, kv.ModRevision
	}
	return recs, nil
}

// putTopic writes topic's record with id in phase, and ops with it, if
// this member still leads and the record is as read. It says whether it
// wrote.
func (s *Session) putTopic(ctx context.Context, l *leader, recs topicRecords, topic, id, phase string, ops ...clientv3.Op) bool {
	key := s.schema.Topic(topic)
	rec := schema.TopicRecord{V: recordVersion, Topic: topic, ID: id, State: phase, At: time.Now().UTC()}
	tr, err := s.cli.Txn(ctx).
		If(l.guard(), clientv3.Compare(clientv3.ModRevision(key), "=", recs.revs[key])).
		Then(append(ops, clientv3.OpPut(key, mustJSON(rec)))...).
		Commit()
	if err != nil || !tr.Succeeded {
		s.log.Warn("write topic record; trying again next round", "topic", topic, "state", phase, "error", err)
		return false
	}
	return true
}

// topicIDChanged handles a topic whose record names id recorded while
// Kafka reports id kafka: once Kafka confirms the topic was created again,
// its state is deleted and the topic held while its offsets reset;
// otherwise the record is damaged and takes Kafka's id.
func (s *Session) topicIDChanged(ctx context.Context, l *leader, tw *topicWatch, recs topicRecords, topic, recorded, kafka string, readAt time.Time) {
	recreated, ok := s.recreated(ctx, tw, topic, recorded, kafka, readAt)
	if !ok {
		return
	}
	if !recreated {
		if pair := [2]string{recorded, kafka}; tw.refused[topic] != pair {
			tw.refused[topic] = pair
			s.log.Error("topic record names another topic id than Kafka, and Kafka shows no sign of the topic being created again (this leader never saw the recorded id, and Kafka holds the group's committed offsets of the topic): a damaged record; recording Kafka's id and keeping the group's state. If the topic was in fact deleted and created again while no member ran, reset the group's offsets of it (keyshare group reset-offsets)",
				"topic", topic, "recorded_id", recorded, "kafka_id", kafka)
		}
		s.putTopic(ctx, l, recs, topic, kafka, schema.TopicActive)
		return
	}
	var dels []clientv3.Op
	for _, prefix := range s.schema.TopicState(topic) {
		dels = append(dels, clientv3.OpDelete(prefix, clientv3.WithPrefix()))
	}
	if s.putTopic(ctx, l, recs, topic, kafka, schema.TopicResetting, dels...) {
		s.log.Error("topic was deleted and created again: the group's ledger and committed offsets of the old topic do not apply to the new log; starting the topic afresh where auto.offset.reset says (records of the old topic not yet handled were deleted with it)",
			"topic", topic, "old_id", recorded, "new_id", kafka)
		tw.resetAt[topic] = time.Now()
		tw.held[topic], tw.changed = true, true
	}
}

// settleTopicReset holds a recreated topic while the group's Kafka offsets
// of it reset, and makes it active again resetSettle after the reset.
func (s *Session) settleTopicReset(ctx context.Context, l *leader, tw *topicWatch, recs topicRecords, topic, id string) {
	tw.held[topic] = true
	if err := s.cfg.TopicIDs.ResetOffsets(ctx, topic); err != nil {
		s.log.Warn("reset the group's Kafka offsets of a recreated topic; trying again next round", "topic", topic, "error", err)
		return
	}
	at, ok := tw.resetAt[topic]
	if !ok { // reset by an earlier leader: wait from now
		tw.resetAt[topic] = time.Now()
		return
	}
	if time.Since(at) >= resetSettle && s.putTopic(ctx, l, recs, topic, id, schema.TopicActive) {
		s.log.Info("recreated topic starts afresh", "topic", topic, "id", id)
		delete(tw.held, topic)
		delete(tw.resetAt, topic)
		tw.changed = true
	}
}

// assignable leaves out the partitions of held topics.
func (tw *topicWatch) assignable(parts []assign.PartitionWeight) []assign.PartitionWeight {
	if len(tw.held) == 0 {
		return parts
	}
	out := make([]assign.PartitionWeight, 0, len(parts))
	for _, p := range parts {
		if !tw.held[p.Topic] {
			out = append(out, p)
		}
	}
	return out
}
