package schedule

import (
	"fmt"
	"testing"
	"time"
)

// TestIdleQueuesBounded: a key whose queue ran empty stays in the map,
// idle, and the scheduler still reports itself idle; at most
// maxIdleQueues stay, however many keys ran, and a key that ran again
// after it was idle is counted once.
func TestIdleQueuesBounded(t *testing.T) {
	s, _ := stepped(t)
	run := func(k key) {
		t.Helper()
		s.Submit(k, tj{k, 0})
		if got, _, _, ok := s.Next(); !ok || got != k {
			t.Fatalf("took %q (%v), want %q", got, ok, k)
		}
		s.Done(k)
	}
	for i := range maxIdleQueues + 100 {
		run(key(fmt.Sprint("k", i)))
		if i%7 == 0 {
			run("hot") // idle, revived and idle again: listed once, as the newest
		}
	}
	if !s.Idle() {
		t.Fatalf("not idle with every job done (%d keys, %d idle)", s.keys.len(), s.idleCount)
	}
	if s.keys.len() > maxIdleQueues || s.idleCount != s.keys.len() {
		t.Fatalf("%d keys kept, %d counted idle: want at most %d, all idle", s.keys.len(), s.idleCount, maxIdleQueues)
	}
	idle := 0
	for q := range s.keys.all() {
		if !q.idle || q.running || q.queued || len(q.jobs) > 0 || s.keys.get(q.key) != q {
			t.Fatalf("key %q kept with idle %v, running %v, queued %v, %d jobs", q.key, q.idle, q.running, q.queued, len(q.jobs))
		}
		idle++
	}
	if idle != s.idleCount {
		t.Fatalf("%d idle queues, %d counted", idle, s.idleCount)
	}
	// A key with a job is not idle, and the scheduler is not.
	s.Submit("k1", tj{"k1", 1})
	if s.Idle() {
		t.Fatal("idle with a job queued")
	}
}

// TestIdleQueueRevivedNotBlocked: a key that comes back after its queue
// sat idle counts its wait from its new job, as a new key does, not from
// the take before it went idle.
func TestIdleQueueRevivedNotBlocked(t *testing.T) {
	s, clock := stepped(t)
	s.Submit("a", tj{"a", 0})
	s.Next()
	s.Done("a") // idle
	*clock = clock.Add(time.Hour)
	s.Submit("a", tj{"a", 1}) // queued, not taken yet
	if !submitOne(s, "a", tj{"a", 2}, 1, *clock) {
		t.Fatal("a counted as blocked as soon as it came back: its wait ran from the take before it went idle")
	}
	*clock = clock.Add(BlockedAfter)
	if submitOne(s, "a", tj{"a", 3}, 1, *clock) {
		t.Fatal("a not counted as blocked BlockedAfter after it came back with no job taken")
	}
}
