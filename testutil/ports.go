package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
)

// FreeAddr returns a 127.0.0.1 address for a process the test starts to
// listen on: a random port below the system's ephemeral range that could
// be bound a moment ago. A port taken from the ephemeral range (":0") and
// released for the process could be handed, in between, to any outgoing
// connection of the tests running beside it; one below the range is never
// handed out by the system, so only another test drawing the same port at
// the same moment could take it. The chaos rows saw the first happen: a
// member's metrics address "already in use" at its start.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo := ephemeralLow()
	for range 100 {
		port := 10000 + rand.IntN(lo-10000)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	t.Fatalf("no free port between 10000 and %d after 100 tries", lo)
	return ""
}

// ephemeralLow is the first port of the system's ephemeral range (Linux's
// ip_local_port_range), or 32768 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo <= 11000 {
		return 32768
	}
	return lo
}
