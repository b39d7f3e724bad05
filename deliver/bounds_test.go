package deliver

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestHugeResponseHeaderRefused: an answer whose headers pass the bound
// is the endpoint's trouble, not a 2xx that counts the record done.
func TestHugeResponseHeaderRefused(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	ep, _ := newEndpoint(t, func(w http.ResponseWriter, r *http.Request) {
		readRequest(t, r)
		if n.Add(1) == 1 {
			w.Header().Set("X-Filler", strings.Repeat("a", 1<<20))
		}
	})
	if err := ep.Handler()(t.Context(), message("orders", 0, 1, "k")); err != nil {
		t.Fatal(err)
	}
	if counts, _ := requestCounts(t, ep); n.Load() != 2 || counts["trouble"] != 1 || counts["done"] != 1 {
		t.Errorf("%d requests, by outcome %v: want the answer with 1 MiB of headers in trouble, then one done", n.Load(), counts)
	}
}

// TestErrorBodyReadBounded: a hostile endpoint answers 503 with a body of
// 64 MiB; the member reads only the few KiB an error keeps and closes the
// connection, so the endpoint gets no more than its socket buffers take.
func TestErrorBodyReadBounded(t *testing.T) {
	t.Parallel()
	ln := listen(t, "127.0.0.1:0")
	t.Cleanup(func() { ln.Close() })
	written := make(chan int64, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.(*net.TCPConn).SetWriteBuffer(4096)
		if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
			t.Errorf("reading the request: %v", err)
		}
		const size = 64 << 20
		fmt.Fprintf(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n", size)
		conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		chunk := []byte(strings.Repeat("x", 1024))
		var n int64
		for n < size {
			m, err := conn.Write(chunk)
			n += int64(m)
			if err != nil {
				break
			}
		}
		written <- n
	}()
	ep, err := New(Config{URL: "http://" + ln.Addr().String() + "/", Backoff: time.Second, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	ctx, cancel := context.WithCancel(t.Context())
	go func() { _ = ep.Handler()(ctx, message("orders", 0, 1, "k")) }()
	n := <-written
	cancel()
	if n >= 1<<20 {
		t.Errorf("the endpoint wrote %d bytes of an error body before the member closed the connection, want under 1 MiB", n)
	}
}

// TestTokenOverPlaintextWarned: an Authorization header bound for
// http:// or grpc:// is warned about once, without its value; over TLS it
// is not.
func TestTokenOverPlaintextWarned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url  string
		warn bool
	}{{"http://sink/", true}, {"grpc://sink:9000", true}, {"https://sink/", false}, {"grpcs://sink:9000", false}} {
		out := &lockedLog{}
		ep, err := New(Config{URL: c.url, Header: http.Header{"Authorization": {"Bearer s3cret"}},
			Logger: hclog.New(&hclog.LoggerOptions{Output: out})})
		if err != nil {
			t.Fatal(err)
		}
		ep.Close()
		log := out.String()
		if got := strings.Count(log, "[WARN]") == 1 && strings.Contains(log, "plaintext"); got != c.warn || strings.Contains(log, "s3cret") {
			t.Errorf("%s: log %q; want a warning about plaintext: %t, and never the token", c.url, log, c.warn)
		}
	}
}
