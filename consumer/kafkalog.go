package consumer

import (
	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

	"github.com/keyshare/keyshare/internal/textsafe"
)

// ForwardLogs routes librdkafka's log events (syslog levels) into hclog,
// escaped, until the channel is closed with the client: for a client made
// with "go.logs.channel.enable" true, whose logs would otherwise go to
// stderr. Packages beside consumer that make their own clients
// (statestore) use it too.
func ForwardLogs(log hclog.Logger, logs <-chan kafka.LogEvent) {
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
