// Package deadletter writes a member's dead letters: the copy of a record
// that failed every attempt (or that an operator skipped), with keyshare's
// headers naming its origin, its error and its attempts, to the
// dead-letter topic, and waits for the broker's ack.
//
// A copy too large for the topic is sent again smaller, without its value,
// then with keyshare's headers alone (Copies, copies.go); any other
// failure is retried with a growing backoff, the first logged as an
// error (Writer, writer.go). The header rules hold for every copy keyshare
// writes, parked copies too: the record's own headers named like
// keyshare's are renamed (RenameOurs, headers.go), so every keyshare.*
// header of a copy is keyshare's.
//
// The consumer package calls it through the interface it defines (its
// deadletter_seam.go); this package imports librdkafka, hclog and
// internal/textsafe, nothing of the consumer. The producer sits behind
// Producer, so the writer's rules are tested with no broker:
//
//	w := &deadletter.Writer{Producer: pr, Topic: "orders.dlq", Backoff: time.Second, MaxBackoff: time.Minute, Log: log}
//	err := w.Write(ctx, m, cause, attempts) // nil once a copy is acknowledged
package deadletter
