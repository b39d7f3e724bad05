package consumer

import (
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// forwardLogs routes librdkafka's log events (syslog levels) into hclog
// until the channel is closed with the client.
func forwardLogs(log hclog.Logger, logs <-chan kafka.LogEvent) {
	for ev := range logs {
		args := []any{"name", ev.Name, "tag", ev.Tag}
		ev.Message = textsafe.Escape(ev.Message)
		switch {
		case ev.Level <= 3:
			log.Error(ev.Message, args...)
		case ev.Level == 4:
			log.Warn(ev.Message, args...)
		case ev.Level <= 6:
			log.Info(ev.Message, args...)
		default:
			log.Debug(ev.Message, args...)
		}
	}
}
