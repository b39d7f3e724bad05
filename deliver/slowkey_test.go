package deliver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keyshare/keyshare/deliver/deliverpb"
	"github.com/keyshare/keyshare/testutil"
)

// The tests of this file run a slow key beside quick ones, each key's
// records handed to the handler one after the other as the consumer does
// (the next only once the handler returned about the previous one), and
// check what an endpoint sees: no two requests of a key worked on at once
// and no record applied after a later one of its key.

const (
	slowKey    = "k7"
	slowOffset = 2  // the slow key's record whose first request stalls
	keyCount   = 10 // keys k0..k9, each on a partition of its own
	perKey     = 12 // records per key
	// noticeStep is how often the stalled request looks at its deadline:
	// an endpoint notices its deadline at the end of a step of its work,
	// not at the instant it passes.
	noticeStep = 300 * time.Millisecond
)

// keyOrderLog is the endpoint's record of the requests it works on.
type keyOrderLog struct {
	stallFor time.Duration // how long the stalled request works before applying

	mu         sync.Mutex
	inFlight   map[string]int
	last       map[string]int64 // the highest offset applied, per key
	overlaps   map[string]int   // requests begun while another of the key was in flight
	violations map[string]int   // records applied below one already applied
	othersDone int              // records of the other keys applied
	duringSlow int              // of those, applied while the slow request stalled
	stalled    bool             // the slow request is being worked on
	stallSeen  bool
	slowTries  []int // the attempt numbers of the slow record's requests
}

func newKeyOrderLog(stallFor time.Duration) *keyOrderLog {
	return &keyOrderLog{stallFor: stallFor, inFlight: map[string]int{}, last: map[string]int64{},
		overlaps: map[string]int{}, violations: map[string]int{}}
}

// work is the endpoint working on one request of key at offset: it
// returns whether it applied the record. deadline is the one the member
// told (zero: none). The stalled request stalls until stallFor has passed
// and every other key's records are applied, or until it notices its
// deadline has passed: then it applies nothing. It does not watch its
// connection: an endpoint deep in its work does not notice the member
// closing it.
func (l *keyOrderLog) work(key string, offset int64, attempt int, deadline time.Time) bool {
	l.mu.Lock()
	if l.inFlight[key] > 0 {
		l.overlaps[key]++
	}
	l.inFlight[key]++
	stall := key == slowKey && offset == slowOffset && !l.stallSeen
	if key == slowKey && offset == slowOffset {
		l.slowTries = append(l.slowTries, attempt)
	}
	if stall {
		l.stallSeen, l.stalled = true, true
	}
	l.mu.Unlock()
	apply := true
	if stall {
		apply = l.stall(deadline)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight[key]--
	if stall {
		l.stalled = false
	}
	if !apply {
		return false
	}
	if last, ok := l.last[key]; ok && offset < last {
		l.violations[key]++
	}
	l.last[key] = max(l.last[key], offset)
	if key != slowKey {
		l.othersDone++
		if l.stalled {
			l.duringSlow++
		}
	}
	return true
}

func (l *keyOrderLog) stall(deadline time.Time) bool {
	end := time.Now().Add(l.stallFor)
	for {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return false
		}
		l.mu.Lock()
		released := l.othersDone == (keyCount-1)*perKey && time.Now().After(end)
		l.mu.Unlock()
		if released {
			return true
		}
		time.Sleep(noticeStep)
	}
}

// check waits for the endpoint to finish every request it works on, then
// fails t unless the slow key saw no overlap and no record out of order,
// and the other keys flowed while it stalled.
func (l *keyOrderLog) check(t *testing.T, wantTries []int) {
	t.Helper()
	for _, p := range l.problems(t, wantTries) {
		t.Error(p)
	}
}

// problems waits for the endpoint to finish every request it works on and
// says what broke the slow key's order, or the other keys' flow.
func (l *keyOrderLog) problems(t *testing.T, wantTries []int) []string {
	t.Helper()
	testutil.WaitFor(t, "the endpoint finished its requests", 30*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, n := range l.inFlight {
			if n > 0 {
				return false
			}
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	if l.overlaps[slowKey] != 0 || l.violations[slowKey] != 0 {
		out = append(out, fmt.Sprintf("key %s: %d requests overlapped another of the key at the endpoint, %d records applied after a later one; want none",
			slowKey, l.overlaps[slowKey], l.violations[slowKey]))
	}
	if l.duringSlow == 0 {
		out = append(out, fmt.Sprintf("no record of another key applied while %s's request stalled: want the other keys flowing", slowKey))
	}
	if l.last[slowKey] != perKey-1 {
		out = append(out, fmt.Sprintf("key %s applied up to offset %d, want %d", slowKey, l.last[slowKey], perKey-1))
	}
	if wantTries != nil && fmt.Sprint(l.slowTries) != fmt.Sprint(wantTries) {
		out = append(out, fmt.Sprintf("the stalled record's requests came with attempts %v, want %v", l.slowTries, wantTries))
	}
	return out
}

// runKeys hands every key's records to h, each key's in offset order one
// at a time, the keys at once, as the consumer's workers do.
func runKeys(t *testing.T, ep *Endpoint) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	h := ep.Handler()
	var wg sync.WaitGroup
	for k := range keyCount {
		wg.Go(func() {
			key := "k" + strconv.Itoa(k)
			for off := range int64(perKey) {
				if err := h(ctx, message("orders", int32(k), off, key)); err != nil {
					t.Errorf("key %s offset %d: handler = %v, want nil", key, off, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// httpKeyEndpoint is an HTTP endpoint working each request through l.
func httpKeyEndpoint(t *testing.T, l *keyOrderLog) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := readRequest(t, r).Records[0]
		var deadline time.Time
		if v := r.Header.Get("Keyshare-Deadline"); v != "" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Errorf("Keyshare-Deadline %q: want milliseconds since the Unix epoch", v)
			}
			deadline = time.UnixMilli(ms)
		}
		if !l.work(string(rec.Key), rec.Offset, rec.Attempt, deadline) {
			w.WriteHeader(http.StatusGatewayTimeout)
		}
	}
}

// grpcKeyEndpoint is a gRPC endpoint working each call through l, told
// its deadline by the call's.
func grpcKeyEndpoint(l *keyOrderLog) deliveryFunc {
	return func(ctx context.Context, req *deliverpb.DeliverRequest) (*deliverpb.DeliverResponse, error) {
		rec := req.GetRecords()[0]
		deadline, _ := ctx.Deadline()
		if !l.work(string(rec.GetKey()), rec.GetOffset(), int(rec.GetAttempt()), deadline) {
			return nil, context.DeadlineExceeded
		}
		return &deliverpb.DeliverResponse{}, nil
	}
}

// defaultStall outlasts any wall-clock bound a default could have had
// (10 s was one): with the defaults the member waits for the answer.
const defaultStall = 11 * time.Second

// TestSlowKeyWaitedForByDefault: with the default Timeout, a request the
// endpoint works on for longer than any timeout is waited for: no second
// request of its key meanwhile, the other keys go on.
func TestSlowKeyWaitedForByDefault(t *testing.T) {
	t.Parallel()
	l := newKeyOrderLog(defaultStall)
	ep, _ := newEndpoint(t, httpKeyEndpoint(t, l), func(c *Config) { c.Timeout = 0 })
	runKeys(t, ep)
	l.check(t, []int{1})
}

func TestGRPCSlowKeyWaitedForByDefault(t *testing.T) {
	t.Parallel()
	l := newKeyOrderLog(defaultStall)
	ep, _ := newGRPCEndpoint(t, grpcKeyEndpoint(l), func(c *Config) { c.Timeout = 0 })
	runKeys(t, ep)
	l.check(t, []int{1})
}

// slowTimeout is the Timeout of the tests that set one; the stalled
// request would work 3 s.
const slowTimeout = 500 * time.Millisecond

// TestSlowKeyPastTimeout: with a Timeout, the endpoint is told the
// deadline and stops at it, applying nothing; the member sends the record
// again, as attempt 2, only after the deadline and its grace, so the two
// requests never overlap at the endpoint and the key stays in order.
func TestSlowKeyPastTimeout(t *testing.T) {
	t.Parallel()
	l := newKeyOrderLog(3 * time.Second)
	ep, _ := newEndpoint(t, httpKeyEndpoint(t, l), func(c *Config) { c.Timeout = slowTimeout })
	runKeys(t, ep)
	l.check(t, []int{1, 2})
}

func TestGRPCSlowKeyPastTimeout(t *testing.T) {
	t.Parallel()
	l := newKeyOrderLog(3 * time.Second)
	ep, _ := newGRPCEndpoint(t, grpcKeyEndpoint(l), func(c *Config) { c.Timeout = slowTimeout })
	runKeys(t, ep)
	l.check(t, []int{1, 2})
}

// TestSlowKeyOverlapsWhenGivingUp: the checks above can fail. With the
// switch-off, a request is abandoned at its timeout without the endpoint
// being told and sent again at once, under the same attempt number: the
// endpoint works on the key's later records beside the stalled one, which
// then applies after them (over HTTP; over gRPC the call's deadline still
// reaches the server, which applies nothing late, but the requests
// overlap).
func TestSlowKeyOverlapsWhenGivingUp(t *testing.T) {
	t.Parallel()
	giveUp := func(c *Config) { c.Timeout, c.giveUpAtTimeout = slowTimeout, true }
	for _, transport := range []string{"HTTP", "gRPC"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			l := newKeyOrderLog(3 * time.Second)
			var ep *Endpoint
			if transport == "HTTP" {
				ep, _ = newEndpoint(t, httpKeyEndpoint(t, l), giveUp)
			} else {
				ep, _ = newGRPCEndpoint(t, grpcKeyEndpoint(l), giveUp)
			}
			runKeys(t, ep)
			got := l.problems(t, []int{1, 2})
			t.Logf("with the switch-off: %q", got)
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.overlaps[slowKey] == 0 || (transport == "HTTP" && l.violations[slowKey] == 0) {
				t.Errorf("with the switch-off, %d overlaps and %d records out of order: want the old behaviour's overlaps (and, over HTTP, its late apply)",
					l.overlaps[slowKey], l.violations[slowKey])
			}
		})
	}
}
