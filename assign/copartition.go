package assign

import "slices"

// CoPartition makes the topics of each set in sets co-partitioned in
// layout: partition p of every later topic of a set, of those in parts,
// gets the ranges, and the owners, that the set's first topic has in p. A
// record of any of the topics then runs on the member that owns the same
// key hash of the first topic's partition p, and a handler of one topic
// can read the keyed state another topic's records wrote (a join). A
// partition the first topic does not have keeps its own slices. layout
// may or may not hold slices of the later topics (CoPartitionLeads leaves
// them out of the assignor's input): those of a partition the first topic
// has are replaced.
//
// The slices of topics in no set are returned as they are. It is a pure
// function.
func CoPartition(layout []Slice, parts []PartitionWeight, sets [][]string) []Slice {
	lead := make(map[string]string) // a later topic → its set's first topic
	for _, set := range sets {
		for _, t := range set[1:] {
			lead[t] = set[0]
		}
	}
	if len(lead) == 0 {
		return layout
	}
	byTP := make(map[TopicPartition][]Slice)
	for _, s := range layout {
		byTP[s.TopicPartition] = append(byTP[s.TopicPartition], s)
	}
	leaderOf := func(tp TopicPartition) (TopicPartition, bool) {
		first, ok := lead[tp.Topic]
		l := TopicPartition{Topic: first, Partition: tp.Partition}
		return l, ok && len(byTP[l]) > 0
	}
	out := make([]Slice, 0, len(layout))
	for _, s := range layout {
		if _, copied := leaderOf(s.TopicPartition); !copied {
			out = append(out, s)
		}
	}
	for _, p := range parts {
		if l, ok := leaderOf(p.TopicPartition); ok {
			for _, ls := range byTP[l] {
				out = append(out, Slice{TopicPartition: p.TopicPartition, Range: ls.Range, Owner: ls.Owner})
			}
		}
	}
	return slices.Clip(out)
}

// CoPartitionLeads returns the partitions of parts the assignor lays out
// when the topics of sets are co-partitioned: all but those of a set's
// later topics whose partition the set's first topic has, which
// CoPartition copies from it. Assigned on their own too, a set's
// partitions would be balanced against each other (with two members and
// one partition of each of two topics, a topic each), and CoPartition's
// copy would undo that in every round.
func CoPartitionLeads(parts []PartitionWeight, sets [][]string) []PartitionWeight {
	lead := make(map[string]string)
	for _, set := range sets {
		for _, t := range set[1:] {
			lead[t] = set[0]
		}
	}
	if len(lead) == 0 {
		return parts
	}
	have := make(map[TopicPartition]bool, len(parts))
	for _, p := range parts {
		have[p.TopicPartition] = true
	}
	out := make([]PartitionWeight, 0, len(parts))
	for _, p := range parts {
		if first, ok := lead[p.Topic]; ok && have[TopicPartition{Topic: first, Partition: p.Partition}] {
			continue
		}
		out = append(out, p)
	}
	return out
}
