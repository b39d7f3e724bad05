package main

import (
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemberBadFlagNeedsNoNetwork: through the binary, a bad setting exits
// 2 naming the flag, without one connection to the etcd and Kafka
// addresses given (a listener that counts them).
func TestMemberBadFlagNeedsNoNetwork(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	for _, bad := range [][]string{{"--max-in-flight", "-3"}, {"--ttl", "5"}, {"--log-level", "verbose"}, {"--deliver", "ftp://sink/"}, {"--work", "5ms"}} {
		args := append([]string{"member", "--group", "g", "--topic", "t", "--etcd", addr, "--brokers", addr}, bad...)
		out, code := run(t, time.Minute, args...)
		if code != 2 || !strings.Contains(out, bad[0]) || strings.Count(strings.TrimSpace(out), "\n") != 0 {
			t.Errorf("%v: exit %d, output:\n%s\nwant exit 2 and one line naming %s", bad, code, out, bad[0])
		}
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("%d connections to the etcd/Kafka address before refusing the flags", n)
	}
}
