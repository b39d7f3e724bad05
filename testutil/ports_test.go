package testutil

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddr: the address is on the loopback, below the ephemeral range,
// and can be listened on.
func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("FreeAddr %q: want 127.0.0.1:PORT", addr)
	}
	if p, _ := strconv.Atoi(port); p < 10000 || p >= ephemeralLow() {
		t.Errorf("port %s is not between 10000 and the ephemeral range's start %d", port, ephemeralLow())
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	ln.Close()
}
