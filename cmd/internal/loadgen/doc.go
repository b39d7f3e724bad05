// Package loadgen writes keyed records to Kafka for keyshare's produce
// command, its demo and its benchmarks. Each value is "key-K:SEQ", SEQ
// counting key K's records from 0 (or Options.FirstSeq, to go on from an
// earlier run), so that whatever consumes them can check per-key order.
//
//	n, err := loadgen.Produce(ctx, "localhost:9092", "orders", 10000, 100, 0, 0, false)
package loadgen
