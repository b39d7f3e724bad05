// Package keyops holds the own logic of an operator's operations on one
// key (keyshare key skip, park, unpark, replay) as a member applies them:
// what a stored skip means to a record (DecideSkip, SkipCause, skip.go);
// a parked copy's form, with its origin and fencing token in keyshare's
// headers, and where a replay stops (ParkedCopy, ParkedOf, ParkedFence,
// ReplayBound, parked.go); the writer of a parked key's copies
// (ParkWriter, parkwriter.go: in the key's order, pipelined up to a
// window, written again from the first that failed, one at a time, after
// a growing backoff, on a new producer when the old one stopped); the
// order an unpark keeps among parked copies written under different
// fencing tokens (CopyOrder, order.go); and the reader of one partition
// a key's prelude runs over (Reader, reader.go: an unpark's parking
// partition to its end, a replay's origin to its bound, with records
// deleted before they were read reported or stepped over).
//
// The consumer package calls it at its hook points (its keyops_seam.go
// names what it asks) and keeps the locks, fences and tables around them;
// this package imports nothing of the consumer (of its siblings, only
// consumer/internal/deadletter's header rules). librdkafka sits behind
// Producer and Source, and the key's queue behind ParkQueue, so the
// writer's and the reader's rules are tested with no broker:
//
//	rd, err := keyops.OpenReader(keyops.ReaderConfig(settings, group), log, topic, partition, from, -1)
//	for m, err := rd.Next(ctx); m != nil && err == nil; m, err = rd.Next(ctx) {
//		handle(m)
//	}
package keyops
