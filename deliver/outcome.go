package deliver

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/keyshare/keyshare/consumer"
	"github.com/keyshare/keyshare/internal/textsafe"
)

// outcome is what an answer (or its absence) means for the records sent.
type outcome int

const (
	// done: the endpoint took every record (2xx); a batch answer may
	// still fail some of them.
	outcomeDone outcome = iota
	// refused: the endpoint refused the records; each fails this attempt,
	// and the consumer's retry policy and dead-letter topic apply.
	outcomeRefused
	// trouble: the endpoint could not answer about the records (no
	// connection, a timeout, 5xx, 408, 429, or a status that names the
	// endpoint's set-up rather than the record): the handler waits and
	// sends them again, counting nothing towards dead-lettering.
	outcomeTrouble
)

func (o outcome) String() string {
	switch o {
	case outcomeDone:
		return "done"
	case outcomeRefused:
		return "refused"
	}
	return "trouble"
}

// classify reads an HTTP status (0: no answer at all).
//
// 401, 403, 404 and 405 count as trouble although they are 4xx: they say
// the member's token, its URL or its method is wrong, which no record can
// be blamed for; refusing the records would dead-letter every one of them
// until someone fixed the flag. An endpoint refuses a record with any
// other 4xx (400, 409, 422 are the usual ones).
func classify(status int) outcome {
	switch {
	case status >= 200 && status <= 299:
		return outcomeDone
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests,
		status == http.StatusUnauthorized, status == http.StatusForbidden,
		status == http.StatusNotFound, status == http.StatusMethodNotAllowed:
		return outcomeTrouble
	case status >= 400 && status <= 499:
		return outcomeRefused
	}
	return outcomeTrouble // no answer, 1xx, 3xx (redirects are not followed), 5xx
}

// retryAfter reads a Retry-After header (seconds, or an HTTP date) as a
// wait from now, capped at limit; false when absent or unreadable.
func retryAfter(v string, now time.Time, limit time.Duration) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		d = time.Duration(min(secs, int64(limit/time.Second)+1)) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = max(at.Sub(now), 0)
	} else {
		return 0, false
	}
	return min(d, limit), true
}

// maxErrorBody is how much of an endpoint's answer an error keeps.
const maxErrorBody = 512

// RefusedError is a record the endpoint refused: a 4xx answer to its
// request, or "failed" for it in a batch answer (Status 200 then). Over
// gRPC, Status is 0 and Code names the call's status code: InvalidArgument
// and the like for the whole call, OK for "failed" in its results. Body is
// the endpoint's explanation, escaped and cut to a few hundred bytes so
// that it can go to logs, status and the dead-letter headers as it is.
type RefusedError struct {
	Status int
	Code   string
	Body   string
}

func (e *RefusedError) Error() string {
	switch {
	case e.Status >= 200 && e.Status <= 299, e.Code == "OK":
		return "deliver: the endpoint failed the record: " + e.Body
	case e.Code != "":
		return fmt.Sprintf("deliver: the endpoint refused the record (gRPC %s): %s", e.Code, e.Body)
	}
	return fmt.Sprintf("deliver: the endpoint refused the record (%d %s): %s", e.Status, http.StatusText(e.Status), e.Body)
}

// FencedError is a record whose fence the endpoint refused ("fenced" in
// a batch answer's results): a later owner of some of the record's hash
// range has written through the endpoint's sink. It matches
// consumer.ErrFenced (errors.Is), so the consumer never dead-letters the
// record: it retries it, with its fence read afresh, while the member
// works on it, and the range's next owner runs it. Body is the endpoint's
// explanation, escaped and cut as RefusedError's.
type FencedError struct {
	Body string
}

func (e *FencedError) Error() string {
	return "deliver: the endpoint refused the record's fence (a later owner of its range has written): " + e.Body
}

// Unwrap makes the error match consumer.ErrFenced.
func (e *FencedError) Unwrap() error { return consumer.ErrFenced }

// safeBody is an endpoint's text as logs and errors may carry it.
func safeBody(b []byte) string {
	return textsafe.Cut(string(b), maxErrorBody) // Cut escapes too
}
