package main

import (
	"strings"
	"testing"
	"time"
)

// TestBrokersDefaultOneRule: every command that must reach Kafka takes
// --brokers 127.0.0.1:9092 by default, as --etcd defaults to
// 127.0.0.1:2379; status and group describe, which read Kafka only to show
// offsets, read it only when given --brokers.
func TestBrokersDefaultOneRule(t *testing.T) {
	needKafka := []string{"member", "produce", "group reset-offsets", "group delete"}
	for _, sub := range keySubcommands {
		needKafka = append(needKafka, "key "+sub)
	}
	flags := commandFlags()
	usageOf := func(name string) string {
		for _, f := range flags[name] {
			if f.Name == "brokers" {
				return f.Usage
			}
		}
		t.Errorf("%s has no --brokers", name)
		return ""
	}
	for _, name := range needKafka {
		if u := usageOf(name); !strings.Contains(u, "default 127.0.0.1:9092") {
			t.Errorf("%s --brokers: %q, want the default 127.0.0.1:9092", name, u)
		}
	}
	for _, name := range []string{"status", "group describe"} {
		if u := usageOf(name); !strings.Contains(u, "default none") {
			t.Errorf("%s --brokers: %q, want no default (Kafka only when asked)", name, u)
		}
	}
	// Without --brokers, a key command goes on to connect (here to an
	// etcd that is not there) instead of refusing its command line.
	out, code := run(t, time.Minute, "key", "describe", "--etcd", "127.0.0.1:1", "--group", "g", "--topic", "orders", "k")
	if code == 2 || strings.Contains(out, "--brokers") {
		t.Errorf("key describe without --brokers: exit %d:\n%s", code, out)
	}
}
