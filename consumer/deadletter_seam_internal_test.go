package consumer

import (
	"testing"

	"github.com/keyshare/keyshare/consumer/internal/deadletter"
)

// TestHeaderNames: the header names consumer exports are those its dead
// letters and parked copies are written with.
func TestHeaderNames(t *testing.T) {
	for _, pair := range [][2]string{
		{HeaderTopic, deadletter.HeaderTopic}, {HeaderPartition, deadletter.HeaderPartition}, {HeaderOffset, deadletter.HeaderOffset},
		{HeaderError, deadletter.HeaderError}, {HeaderAttempts, deadletter.HeaderAttempts}, {HeaderDropped, deadletter.HeaderDropped},
		{HeaderFence, deadletter.HeaderFence}, {RenamedHeaderPrefix, deadletter.RenamedHeaderPrefix},
	} {
		if pair[0] != pair[1] {
			t.Errorf("consumer exports %q, its copies are written with %q", pair[0], pair[1])
		}
	}
}
