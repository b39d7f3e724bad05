package netns

import (
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// SlowLink is a TCP relay that delays every chunk of bytes it forwards, in
// both directions, and "loses" some: it stands in for tc netem on kernels
// built without sch_netem. Loss cannot be shown to a TCP endpoint from user
// space (TCP would retransmit it anyway), so a lost chunk is delivered
// after an extra stall of Retransmit, which is what TCP's loss recovery
// costs the application: a 200 ms one-way delay gives an RTT of 400 ms and
// a first retransmission timeout of about 1 s (RFC 6298: max(1 s, SRTT +
// 4·RTTVAR), Linux: 200 ms + SRTT), so Retransmit defaults to 600 ms.
// Order within a connection is kept, as TCP keeps it.
type SlowLink struct {
	Delay      time.Duration // one way, added to every chunk
	Loss       float64       // probability that a chunk stalls for Retransmit more
	Retransmit time.Duration // default 600 ms
	ln         net.Listener
	upstream   string
	wg         sync.WaitGroup
	mu         sync.Mutex
	conns      []net.Conn
}

// NewSlowLink listens on listen (host:port) and relays to upstream, until
// the test ends.
func NewSlowLink(t testing.TB, listen, upstream string, delay time.Duration, loss float64) *SlowLink {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatalf("netns: slow link on %s: %v", listen, err)
	}
	s := &SlowLink{Delay: delay, Loss: loss, Retransmit: 600 * time.Millisecond, ln: ln, upstream: upstream}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

// Addr is the relay's address.
func (s *SlowLink) Addr() string { return s.ln.Addr().String() }

func (s *SlowLink) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", s.upstream)
		if err != nil {
			c.Close()
			continue
		}
		s.mu.Lock()
		s.conns = append(s.conns, c, u)
		s.mu.Unlock()
		s.wg.Add(2)
		go s.pump(c, u)
		go s.pump(u, c)
	}
}

type chunk struct {
	b  []byte
	at time.Time // when it may be delivered
}

// pump copies src to dst, each chunk held until its delivery time.
func (s *SlowLink) pump(src, dst net.Conn) {
	defer s.wg.Done()
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		last := time.Time{}
		for {
			b := make([]byte, 32*1024)
			n, err := src.Read(b)
			if n > 0 {
				at := time.Now().Add(s.Delay)
				if rng.Float64() < s.Loss {
					at = at.Add(s.Retransmit)
				}
				if at.Before(last) {
					at = last // in order
				}
				last = at
				q <- chunk{b[:n], at}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	io.Copy(io.Discard, src)
}

func (s *SlowLink) close() {
	s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
