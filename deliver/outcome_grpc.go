package deliver

import (
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// classifyCode reads a gRPC call's status code as classify reads an HTTP
// status (docs/delivery.md has the table).
//
// InvalidArgument, FailedPrecondition, OutOfRange and AlreadyExists are
// the endpoint refusing the records (400, 409 and 422 over HTTP): each
// fails its attempt. Every other code is trouble: Unavailable,
// DeadlineExceeded, ResourceExhausted, Aborted, Internal, Unknown and
// DataLoss say the endpoint could not take them now (5xx, 408, 429);
// Unauthenticated, PermissionDenied, NotFound and Unimplemented name the
// member's set-up, its token or the service it calls (401, 403, 404, 501),
// which no record can be blamed for; Canceled, when the member did not
// cancel, is the endpoint's server going away.
func classifyCode(c codes.Code) outcome {
	switch c {
	case codes.OK:
		return outcomeDone
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.AlreadyExists:
		return outcomeRefused
	}
	return outcomeTrouble
}

// pushbackKey is the trailer by which a gRPC server asks its clients to
// wait before trying again (gRPC's retry design, which grpc-go's own
// retries honour): milliseconds, one value.
const pushbackKey = "grpc-retry-pushback-ms"

// pushback reads the wait a call's trailer asks for, capped at limit;
// false when there is none, or it is unreadable, negative (a server
// asking clients not to retry: the records still wait, on the backoff) or
// given twice.
func pushback(trailer metadata.MD, limit time.Duration) (time.Duration, bool) {
	v := trailer.Get(pushbackKey)
	if len(v) != 1 {
		return 0, false
	}
	ms, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	return min(time.Duration(min(ms, int64(limit/time.Millisecond)+1))*time.Millisecond, limit), true
}

// codeName is a status code as spans carry it (rpc.response.status_code):
// DEADLINE_EXCEEDED for DeadlineExceeded.
func codeName(c codes.Code) string {
	s := c.String()
	var b strings.Builder
	for i, r := range s {
		if i > 0 && unicode.IsUpper(r) && s != "OK" {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}
