package deliver

import (
	"strconv"
	"time"
)

// A request's deadline is the one bound the member puts on an endpoint's
// work, and only when Config.Timeout is set: by default a request the
// endpoint has accepted is waited for as long as its connection lives,
// because giving up on it while the endpoint still works would let the
// key's later records (or the same record again) reach the endpoint
// beside it, and apply before it. A dead endpoint is found by the
// connection's liveness instead: TCP keepalive, and HTTP/2 or gRPC pings
// (http.go, grpc.go).
//
// With a Timeout, each request tells the endpoint its deadline: over HTTP
// in the Keyshare-Deadline header, over gRPC as the call's deadline. Past
// it the endpoint must not apply the request. The member then waits until
// the deadline and DeadlineGrace have passed before it sends the record
// again, or the key's next one, so that the endpoint has stopped working
// on the old request by then; the request sent again carries the next
// attempt number, by which an endpoint can still refuse an older attempt
// that comes late.

// DeadlineGrace is how long after a request's deadline the member still
// waits for its answer over HTTP (a gRPC call ends at the deadline
// itself), and before it sends the request again: room for
// the endpoint to notice its deadline has passed, for its answer to
// travel, and for the member's and endpoint's clocks to differ (the
// Keyshare-Deadline header is a time, not a duration).
const DeadlineGrace = 2 * time.Second

// DeadlineHeader is the HTTP request header that carries a request's
// deadline, in milliseconds since the Unix epoch, when Config.Timeout is
// set.
const DeadlineHeader = "Keyshare-Deadline"

// deadline is the deadline of a request sent now: zero when the member
// sets none.
func (e *Endpoint) deadline() time.Time {
	if e.cfg.Timeout == 0 || e.cfg.giveUpAtTimeout {
		return time.Time{}
	}
	return time.Now().Add(e.cfg.Timeout)
}

// deadlineValue is deadline as DeadlineHeader carries it.
func deadlineValue(deadline time.Time) string {
	return strconv.FormatInt(deadline.UnixMilli(), 10)
}
