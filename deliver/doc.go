// Package deliver hands records to an endpoint written in any language:
// each record, or each batch of records, is POSTed as JSON to an
// http(s):// URL, or sent in a call of keyshare.deliver.v1.Delivery
// (deliverpb/deliver.proto) to a grpc:// or grpcs:// one, and the answer
// says what happened to it. Its handlers plug into a
// keyshare consumer, so every guarantee the consumer keeps still holds:
// one key at a time in offset order, keys in parallel, the ledger and safe
// commit, handoffs, retries and the dead-letter topic.
//
//	ep, err := deliver.New(deliver.Config{URL: "https://sink.internal/records", MemberID: "m-1"})
//	if err != nil { ... }
//	cfg.Handler = ep.Handler() // or cfg.BatchHandler = ep.BatchHandler()
//
// A record the endpoint refuses (a 4xx answer, or "failed" in a batch
// answer) fails its attempt: the consumer's RetryPolicy and dead-letter
// topic apply as for a Go handler. A record whose fence the endpoint's sink
// refused ("fenced" in a batch answer) is a *FencedError, which matches
// consumer.ErrFenced: retried while the member works on it, never
// dead-lettered. An endpoint that cannot answer
// (connection refused, a timeout, 5xx, 408, 429) or whose answer names the
// member's set-up (3xx, 401, 403, 404, 405) is in trouble, not the
// record: the handler waits and tries again until the endpoint answers or
// the record's context ends, so an endpoint down for minutes dead-letters
// nothing and loses nothing. A gRPC call's status code is read by the
// same rules: InvalidArgument, FailedPrecondition, OutOfRange and
// AlreadyExists refuse the records, every other failure is the endpoint's
// trouble.
//
// A request the endpoint works on is waited for by default, however long
// it takes, so that a slow record holds its own key and nothing overtakes
// it; a dead endpoint is found by TCP keepalive and HTTP/2 or gRPC pings.
// With Config.Timeout set, each request carries a deadline the endpoint
// must keep (the Keyshare-Deadline header, or the call's deadline), and
// the records are sent again, as the next attempt, only once the deadline
// and DeadlineGrace have passed.
//
// With Config.KeyState set, each record goes with its key's state and each
// result may give the key's new state, which goes back through the
// record's KeyState: package statestore's *Key is one, so a handler
// wrapped by a statestore.Store gives an endpoint in any language
// effectively-once per-key state (keyshare member --state). An answer that
// changes the state of a record sent without it, or of one not done, is a
// bad answer: the endpoint's trouble.
//
// docs/delivery.md gives the wire format, the outcome of each answer, and
// example endpoints.
package deliver
