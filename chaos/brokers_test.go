package chaos

import (
	"fmt"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Faults of the Kafka cluster itself, for rows that run on three Apache
// Kafka brokers (replication factor 3): leadership moved while every broker
// runs, a broker killed, every broker restarted in turn.

// offsetsTopic is Kafka's own topic of committed offsets; the group's
// coordinator is the leader of its partition groupOffsetsPartition.
const offsetsTopic = "__consumer_offsets"

// groupOffsetsPartition is the __consumer_offsets partition of group:
// abs(group.hashCode()) % offsets.topic.num.partitions (4 in devcluster),
// as Kafka's GroupCoordinator computes it.
func groupOffsetsPartition(group string) int32 {
	var h int32
	for _, c := range group { // ASCII: Java's UTF-16 code units are the bytes
		h = 31*h + int32(c)
	}
	return (h & 0x7fffffff) % 4
}

// partitionInfo is the leader and in-sync replicas of one partition, as the
// cluster's metadata says.
func (e *env) partitionInfo(t string, p int32) (leader int32, isr []int32, err error) {
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "log_level": 0})
	if err != nil {
		return 0, nil, err
	}
	defer a.Close()
	md, err := a.GetMetadata(&t, false, 5000)
	if err != nil {
		return 0, nil, err
	}
	for _, pm := range md.Topics[t].Partitions {
		if pm.ID == p {
			return pm.Leader, pm.Isrs, nil
		}
	}
	return 0, nil, fmt.Errorf("no partition %s/%d in metadata", t, p)
}

// leaderNode is the index (0-based, as devcluster numbers nodes) of the
// broker leading t/p.
func (e *env) leaderNode(t string, p int32) int {
	for range 100 {
		if l, _, err := e.partitionInfo(t, p); err == nil && l > 0 {
			return int(l) - 1
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("partition %s/%d has no leader", t, p)
	return -1
}

// waitInSync waits until every partition of the chaos topic and of
// __consumer_offsets has all three replicas in sync, as a rolling restart
// waits for no under-replicated partitions before it stops the next broker.
func (e *env) waitInSync() {
	deadline := time.Now().Add(90 * time.Second)
	a, err := kafka.NewAdminClient(&kafka.ConfigMap{"bootstrap.servers": e.brokers, "log_level": 0})
	if err != nil {
		e.t.Fatal(err)
	}
	defer a.Close()
	for {
		short := ""
		for _, t := range []string{topic, offsetsTopic} {
			md, err := a.GetMetadata(&t, false, 5000)
			if err != nil {
				short = err.Error()
				break
			}
			for _, pm := range md.Topics[t].Partitions {
				if len(pm.Isrs) < 3 || pm.Leader < 0 {
					short = fmt.Sprintf("%s/%d: leader %d, isr %v", t, pm.ID, pm.Leader, pm.Isrs)
				}
			}
		}
		if short == "" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("partitions under-replicated after 90 s: %s", short)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// moveLeaders moves, each round, the leadership of every partition of the
// topic and of the group's __consumer_offsets partition (the group
// coordinator) to another in-sync replica, no broker stopping.
func moveLeaders(e *env, rounds int) {
	m, err := e.apache.NewLeaderMover()
	if err != nil {
		e.t.Fatal(err)
	}
	defer m.Close()
	led := map[int]bool{}
	for range rounds {
		e.mu.Lock()
		parts := e.parts
		e.mu.Unlock()
		e.fault()
		type tp struct {
			t string
			p int32
		}
		targets := []tp{{offsetsTopic, groupOffsetsPartition(group)}}
		for p := range parts {
			targets = append(targets, tp{topic, p})
		}
		for _, x := range targets {
			from, to, err := m.Move(x.t, x.p)
			if err != nil {
				e.t.Fatal(err)
			}
			led[to] = true
			e.t.Logf("leader of %s/%d moved from broker %d to %d", x.t, x.p, from, to)
		}
		time.Sleep(time.Second)
	}
	// Over several rounds every broker must have led something; one
	// round (the soak's nemesis) may move every leader to the same two.
	if rounds > 1 && len(led) < 3 {
		e.t.Errorf("leadership moved to only %d of 3 brokers", len(led))
	}
}

// killBrokers SIGKILLs a broker each round, the leader of a partition of the
// topic or the group coordinator in turn, and restarts it 2 s later from
// its data.
func killBrokers(e *env, rounds int) {
	for i := range rounds {
		what, p := topic, int32(i%2)
		if i%2 == 1 {
			what, p = offsetsTopic, groupOffsetsPartition(group)
		}
		n := e.leaderNode(what, p)
		e.t.Logf("SIGKILL broker %d, leader of %s/%d", n+1, what, p)
		if err := e.apache.Kill(n); err != nil {
			e.t.Fatal(err)
		}
		e.fault()
		time.Sleep(2 * time.Second)
		if err := e.apache.Restart(n); err != nil {
			e.t.Fatal(err)
		}
		e.waitInSync()
	}
}

// rollBrokers restarts every broker in turn (SIGTERM: controlled shutdown,
// which moves its leaderships first), each once all replicas are in sync
// again, as Kafka's own rolling-restart tests (OffsetValidationTest) do.
func rollBrokers(e *env, rounds int) {
	for range rounds {
		for n := range 3 {
			e.t.Logf("restart broker %d", n+1)
			if err := e.apache.Stop(n); err != nil {
				e.t.Fatal(err)
			}
			e.fault()
			if err := e.apache.Restart(n); err != nil {
				e.t.Fatal(err)
			}
			e.waitInSync()
		}
	}
}
