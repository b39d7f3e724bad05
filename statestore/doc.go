// Package statestore keeps the state of each record's key for a keyshare
// handler, and moves it with the key's hash range: a handler reads and
// replaces its record's key's state (KeyOf), each change is appended to a
// compacted changelog topic before the record counts as done, and a member
// that takes a range rebuilds the range's state from the changelog before
// it runs the range's records.
//
//	store, err := statestore.New(ctx, statestore.Config{Group: "g", Topics: []string{"orders"}, Kafka: kafkaCfg})
//	cfg.Handler = store.Handler(func(ctx context.Context, m *kafka.Message) error {
//		k := statestore.KeyOf(ctx, m)
//		n, _ := k.Get()
//		k.Put(increment(n))
//		return nil
//	})
//
// Store.BatchHandler does the same for a consumer.BatchHandler, and
// Store.Lookup reads, from a handler of one topic, the state another
// co-partitioned topic's records left for the key (a join).
//
// The format of the changelog, the restore rule and the skip rule are
// package keystate's; this package is their adapter to Kafka and to
// package consumer: it learns a record's range and fencing token from
// consumer.FenceOf, restores a range the first time a record of it comes
// under a new token, skips a record at or below its key's applied offset
// (it changed the state already, before a crash or on a member that lost
// the range), and appends a change, waiting for its acknowledgement,
// before it returns. docs/state.md says what it guarantees and why.
package statestore
