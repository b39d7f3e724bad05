// Package schedule runs a member's records on a fixed number of workers,
// keeping each key's records in order and never two of one key at once,
// and finds the keys that are blocked (a head record that does not
// finish) so that their queued records can leave memory.
//
// It knows nothing of Kafka or etcd: a job is any value, and its key any
// comparable value that gives its own hash (Key). The consumer package
// schedules its records with it.
//
//	s := schedule.New[recordKey](workers, func(j *job, taken time.Time) { handle(j) })
//	defer s.Close()
//	s.Submit(j.key, j) // runs after the earlier jobs of key j.key
//
// A Batcher (NewBatcher) runs jobs in batches instead: a worker gathers
// the head jobs of several ready keys into a Batch and holds those keys
// until it releases them. Scheduler and Batcher share their key queues
// (order, turns, blocked keys) and nothing else.
//
// Either, built with no workers, is driven step by step (Scheduler's Next
// and Done, Batcher's TakeBatch and Batch.Release), with a clock set by
// SetClock: that is how the consumer's model tests play workers.
package schedule
