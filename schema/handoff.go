package schema

import (
	"fmt"
)

// HandoffPlan is the value of handoffs/<id>.
type HandoffPlan struct {
	V   int   `json:"v"`
	Gen int64 `json:"gen"` // the generation the handed-off records carry
	// Members are the members the plan sends ranges to, each with the
	// create revision of its registration (its session) when planned.
	Members map[string]int64 `json:"members"`
	Ranges  []PlannedHandoff `json:"ranges"`
}

// PlannedHandoff is where one range of the leaving member goes.
type PlannedHandoff struct {
	Key string `json:"key"` // the range record's key
	Rev int64  `json:"rev"` // the record's ModRevision the plan is for
	To  string `json:"to"`
}

// StoredHandoff is a plan as read from etcd: Rev is the key's ModRevision
// (0: none), ByKey its ranges by range key. A damaged value has a Rev and no
// ranges, so the leader writes it again.
type StoredHandoff struct {
	Rev   int64
	Plan  HandoffPlan
	ByKey map[string]PlannedHandoff
}

// DecodeHandoff reads a handoff plan written at revision rev, refusing one
// that names a revision or a registration from after it.
func DecodeHandoff(key string, data []byte, rev int64) (StoredHandoff, error) {
	h := StoredHandoff{Rev: rev}
	var p HandoffPlan
	if err := decodeStrict(key, data, &p, func() int { return p.V }); err != nil {
		return h, err
	}
	if p.Gen < 0 || p.Gen > maxGeneration {
		return h, &BadValueError{Key: key, Problem: fmt.Sprintf("generation %d is outside 0..%d", p.Gen, maxGeneration)}
	}
	// Every revision a plan names was read before the plan was written.
	for id, created := range p.Members {
		if err := CheckName("member id", id); err != nil || created <= 0 || created > rev {
			return h, &BadValueError{Key: key, Problem: fmt.Sprintf("member %q registered at revision %d: want a member id and a revision from 1 to the plan's %d", id, created, rev)}
		}
	}
	byKey := make(map[string]PlannedHandoff, len(p.Ranges))
	for _, r := range p.Ranges {
		if _, ok := p.Members[r.To]; !ok || r.Rev <= 0 || r.Rev > rev {
			return h, &BadValueError{Key: key, Problem: fmt.Sprintf("range %s: revision %d (want 1 to the plan's %d), member %q not among the plan's members", r.Key, r.Rev, rev, r.To)}
		}
		byKey[r.Key] = r
	}
	h.Plan, h.ByKey = p, byKey
	return h, nil
}
