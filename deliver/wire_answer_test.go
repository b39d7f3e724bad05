package deliver

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/testutil"
)

// TestCapitalisedResultsFail: over a real socket, an endpoint that writes
// its answer with .NET's default casing, {"Results":[{"status":"failed"}]},
// fails the record: it is not counted done.
func TestCapitalisedResultsFail(t *testing.T) {
	t.Parallel()
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		io.WriteString(w, `{"Results":[{"status":"failed","error":"no account"}]}`)
	})
	err := ep.Handler()(t.Context(), message("orders", 0, 1, "k"))
	var refused *RefusedError
	if !errors.As(err, &refused) || !strings.Contains(err.Error(), "no account") {
		t.Fatalf("handler = %v, want the endpoint's failure of the record (no account)", err)
	}
	if got := recordCounts(t, ep); got["done"] != 0 || got["failed"] != 1 {
		t.Errorf("records counted %v, want 1 failed and none done", got)
	}
}

// TestCutAnswerSentAgain: an endpoint that dies mid-answer, over a real
// socket, is in trouble and its answer is not read as every record done.
// Each way a body can be cut is tried: a Connection: close answer with no
// length, whose end is the connection's (only the JSON's own end can
// tell), and one with a Content-Length the body falls short of (the
// reader's io.ErrUnexpectedEOF). The request is sent again, the second
// answer fails the record, and the member's log names what it could not
// read.
func TestCutAnswerSentAgain(t *testing.T) {
	t.Parallel()
	const whole = `{"results":[{"status":"failed","error":"no account"}]}`
	for _, tc := range []struct {
		name, cut, logged string
	}{
		{"connection close", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + whole[:20],
			"not one whole JSON object (unexpected end of JSON input)"},
		{"content length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n" + whole[:20],
			"unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			answers := []string{tc.cut,
				"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + whole}
			addr, requests := serveRaw(t, answers)
			var log testutil.Buffer
			ep, err := New(Config{URL: "http://" + addr + "/records", MemberID: "m-1", Timeout: 2 * time.Second,
				Backoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
				Logger: hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Debug})})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(ep.Close)
			err = ep.Handler()(t.Context(), message("orders", 0, 1, "k"))
			var refused *RefusedError
			if !errors.As(err, &refused) || !strings.Contains(err.Error(), "no account") {
				t.Fatalf("handler = %v, want the second answer's failure of the record (no account)", err)
			}
			if got := requests.Load(); got != 2 {
				t.Errorf("%d requests, want 2: the cut answer's request sent again", got)
			}
			if got := log.String(); !strings.Contains(got, "delivery endpoint not answering") || !strings.Contains(got, tc.logged) {
				t.Errorf("log:\n%s\nwant the endpoint in trouble, with %s", got, tc.logged)
			}
		})
	}
}

// serveRaw answers the i-th request on a real socket with answers[i],
// written byte for byte, and closes the connection; it counts requests.
func serveRaw(t *testing.T, answers []string) (addr string, requests *atomic.Int32) {
	t.Helper()
	ln := listen(t, "127.0.0.1:0")
	requests = new(atomic.Int32)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			req, err := http.ReadRequest(bufio.NewReader(conn))
			if err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
				if i := int(requests.Add(1)) - 1; i < len(answers) {
					_, _ = io.WriteString(conn, answers[i])
				}
			}
			conn.Close()
		}
	}()
	return ln.Addr().String(), requests
}
