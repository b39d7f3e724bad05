package schema

import "time"

// Topic record states.
const (
	TopicActive    = "active"
	TopicResetting = "resetting"
)

// TopicRecord is the value of topics/<topic>: the Kafka topic id that the
// group's state of the topic belongs to.
type TopicRecord struct {
	V     int       `json:"v"`
	Topic string    `json:"topic"`
	ID    string    `json:"id"`
	State string    `json:"state"`
	At    time.Time `json:"at"`
}

// DecodeTopic reads a topic record.
func DecodeTopic(key string, data []byte) (TopicRecord, error) {
	var r TopicRecord
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return TopicRecord{}, err
	}
	if r.ID == "" || (r.State != TopicActive && r.State != TopicResetting) {
		return TopicRecord{}, &BadValueError{Key: key, Problem: "want a topic id and state active or resetting"}
	}
	return r, nil
}
