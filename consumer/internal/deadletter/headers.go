package deadletter

import (
	"strings"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// The names of keyshare's headers on a dead letter and a parked copy; the
// consumer package exports the same names (consumer.HeaderTopic, ...), and
// its tests hold the two to each other.
const (
	HeaderTopic     = "keyshare.topic"
	HeaderPartition = "keyshare.partition"
	HeaderOffset    = "keyshare.offset"
	HeaderError     = "keyshare.error"
	HeaderAttempts  = "keyshare.attempts"
	HeaderDropped   = "keyshare.dropped"
	HeaderFence     = "keyshare.fence"

	// HeaderPrefix starts every header name of keyshare's; a record's own
	// header named so (in any case) gets RenamedHeaderPrefix in front on
	// its copies.
	HeaderPrefix        = "keyshare."
	RenamedHeaderPrefix = "original."
)

// RenameOurs is a copy of a record's own headers with the names that
// start with keyshare's prefix renamed (RenamedHeaderPrefix), so that
// every keyshare.* header of a copy keyshare writes is keyshare's.
func RenameOurs(hs []kafka.Header) []kafka.Header {
	var out []kafka.Header
	for _, h := range hs {
		if len(h.Key) >= len(HeaderPrefix) && strings.EqualFold(h.Key[:len(HeaderPrefix)], HeaderPrefix) {
			h.Key = RenamedHeaderPrefix + h.Key
		}
		out = append(out, h)
	}
	return out
}

// HeaderValue is the value of m's first header named name ("" if none).
func HeaderValue(m *kafka.Message, name string) string {
	for _, h := range m.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}
