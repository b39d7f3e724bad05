// Package keyops holds the own logic of an operator's operations on one
// key (keyshare key skip, park, unpark, replay) as a member applies them:
// what a stored skip means to a record (DecideSkip, SkipCause, skip.go),
// the order an unpark keeps among parked copies written under different
// fencing tokens (CopyOrder, order.go), and the reader of one partition a
// key's prelude runs over (Reader, reader.go: an unpark's parking
// partition to its end, a replay's origin to its bound, with records
// deleted before they were read reported or stepped over).
//
// The consumer package calls it at its hook points (its keyops_seam.go
// names what it asks) and keeps the locks, fences and tables around them;
// this package imports nothing of the consumer. librdkafka sits behind
// Source, so the reader's rules are tested on a scripted log:
//
//	rd, err := keyops.OpenReader(keyops.ReaderConfig(settings, group), log, topic, partition, from, -1)
//	for m, err := rd.Next(ctx); m != nil && err == nil; m, err = rd.Next(ctx) {
//		handle(m)
//	}
package keyops
