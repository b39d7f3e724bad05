package schema

import "time"

// PauseRecord is the value of the group's paused key: an operator asked every
// member to stop taking records. Members keep their ranges and sessions,
// finish what is in flight and flush it; the leader goes on committing. The
// key has no lease, so the pause outlives member restarts until an operator
// resumes the group.
type PauseRecord struct {
	V      int       `json:"v"`
	By     string    `json:"by"`               // who paused it (user@host)
	Reason string    `json:"reason,omitempty"` // free text from the operator
	At     time.Time `json:"at"`
}

// DecodePause reads a pause record.
func DecodePause(key string, data []byte) (PauseRecord, error) {
	var r PauseRecord
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return PauseRecord{}, err
	}
	return r, nil
}
