package schedule

import "time"

// BlockedAfter is how long a key with queued jobs may go without a worker
// taking one before it counts as blocked.
const BlockedAfter = time.Second

// Queued returns how many jobs of key k are queued (not counting those a
// worker runs).
func (s *queues[K, J]) Queued(k K) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.keys.get(k); q != nil {
		return len(q.jobs)
	}
	return 0
}

// EvictBlocked removes from the queue of every blocked key its jobs
// beyond the first keep, and returns them.
func (s *queues[K, J]) EvictBlocked(keep int) []J {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var out []J
	for q := range s.keys.all() {
		if len(q.jobs) <= keep || now.Sub(q.lastTake) < BlockedAfter {
			continue
		}
		out = append(out, q.jobs[keep:]...)
		clear(q.jobs[keep:])
		q.jobs = q.jobs[:keep]
	}
	return out
}
