package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/keyshare/keyshare/assign"
	"github.com/keyshare/keyshare/internal/strictjson"
	"github.com/keyshare/keyshare/ledger"
)

// RecordVersion is the version of every JSON value coord writes.
const RecordVersion = 1

// Bounds on the numbers read from etcd. A value that decodes cleanly but
// holds an absurd number is damaged: arithmetic on it would overflow (a
// generation plus one, a drain budget in nanoseconds) or make every later
// value look old (a reset epoch above any revision).
const (
	// maxGeneration leaves room for 2^62 more assignments.
	maxGeneration = 1 << 62
	// MaxDrain bounds a drain budget (Config.DrainTimeout and every stored
	// drain_ms): an hour, far below where milliseconds overflow as
	// nanoseconds.
	MaxDrain   = time.Hour
	maxDrainMs = int64(MaxDrain / time.Millisecond)
)

// checkEpoch refuses a reset epoch above rev, the revision its value was
// written at: an epoch is the revision of the snapshot the reset was
// planned on, always older than the write that carries it. rev 0 (not
// known) checks nothing.
func checkEpoch(key string, epoch, rev int64) error {
	if rev > 0 && epoch > rev {
		return &BadValueError{Key: key, Problem: fmt.Sprintf("reset epoch %d is above the revision %d the value was written at", epoch, rev)}
	}
	return nil
}

// Range states.
const (
	// StateActive: the owner works on the range.
	StateActive = "active"
	// StateRevoking: the leader asked the owner to give the range up; the
	// owner takes no new records of it, finishes those in flight and then
	// writes StateReleased.
	StateRevoking = "revoking"
	// StateReleased: the owner has finished and flushed; the leader may give
	// the range to its next owner.
	StateReleased = "released"
)

// RangeRecord is the value of ranges/<topic>/<partition>/<lo>.
type RangeRecord struct {
	V         int       `json:"v"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"`
	Hi        uint64    `json:"hi"`
	Owner     string    `json:"owner"`
	State     string    `json:"state"`
	Target    string    `json:"target,omitempty"` // next owner, while revoking or released
	Gen       int64     `json:"gen"`              // generation that last changed the record
	Since     time.Time `json:"since"`            // when State was set
	// DrainMs is, on a revoking range, how long the owner may drain it,
	// in milliseconds, measured on the owner's own clock from when it sees
	// the revoke. The leader sets it from its DrainTimeout, so the budget is
	// one party's decision and no wall-clock instant crosses machines.
	DrainMs int64 `json:"drain_ms,omitempty"`
	// Reset is the epoch of the last offset reset an operator applied to
	// the range while its owner ran (keyshare group reset-offsets on a
	// paused group): the owner drops its in-memory state of the range and
	// loads the ledger entry written with it when Reset grows above what
	// it loaded. Only a reset writes it; a record written without it (0)
	// means "no newer reset", never "reload".
	Reset int64 `json:"reset,omitempty"`
}

// Range is the record's hash range.
func (r RangeRecord) Range() ledger.HashRange { return ledger.HashRange{Lo: r.Lo, Hi: r.Hi} }

// MemberInfo is the value of members/<id>, written under the member's lease.
type MemberInfo struct {
	V       int       `json:"v"`
	ID      string    `json:"id"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Weight  int       `json:"weight"`
	Leaving bool      `json:"leaving,omitempty"`
}

// SubscriptionRecord is the value of subscriptions/<id>, written under the
// member's lease in the transaction that registers it: the topics the
// member consumes, sorted, each once. A joining member compares its topics
// with every live member's (Join). It is a key of its own, not a field of
// MemberInfo, for the reason LeaveRecord is: members from before it still
// read the registration. A member from before it writes none and is not
// compared.
type SubscriptionRecord struct {
	V      int      `json:"v"`
	Topics []string `json:"topics"`
}

// DecodeSubscription reads a member's topic list, sorted and each once.
func DecodeSubscription(key string, data []byte) (SubscriptionRecord, error) {
	var r SubscriptionRecord
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return SubscriptionRecord{}, err
	}
	if len(r.Topics) == 0 {
		return SubscriptionRecord{}, &BadValueError{Key: key, Problem: "no topics"}
	}
	r.Topics = slices.Compact(slices.Sorted(slices.Values(r.Topics)))
	return r, nil
}

// LeaveRecord is the value of leaving/<id>, written under the member's
// lease with its leaving registration: the member drains and releases its
// ranges itself (Session.Leave), and the leader hands a range it has not
// released on after DrainMs plus a grace. It is a key of its own, not a
// field of MemberInfo, so that a member from before it (whose strict
// decoder would call the registration damaged, and the member gone) still
// reads the registration; a leader from before it revokes the ranges as it
// always did, and the leaver's releases and those revokes fence each other.
type LeaveRecord struct {
	V       int   `json:"v"`
	DrainMs int64 `json:"drain_ms"`
}

// DecodeLeave reads a leaving member's drain budget.
func DecodeLeave(key string, data []byte) (LeaveRecord, error) {
	var l LeaveRecord
	if err := decodeStrict(key, data, &l, func() int { return l.V }); err != nil {
		return LeaveRecord{}, err
	}
	if l.DrainMs <= 0 || l.DrainMs > maxDrainMs {
		return LeaveRecord{}, &BadValueError{Key: key, Problem: fmt.Sprintf("drain budget %dms must be positive and at most %dms", l.DrainMs, maxDrainMs)}
	}
	return l, nil
}

// GenerationRecord is the value of the generation key.
type GenerationRecord struct {
	V          int       `json:"v"`
	Generation int64     `json:"generation"`
	Leader     string    `json:"leader"`
	At         time.Time `json:"at"`
}

// CommitRecord is the value of commits/<topic>/<partition>: the offset the
// leader has committed (or is about to commit) to Kafka for the partition.
type CommitRecord struct {
	V      int       `json:"v"`
	Offset int64     `json:"offset"`
	Leader string    `json:"leader"`
	At     time.Time `json:"at"`
	// Reset is set by an operator's offset reset (keyshare group
	// reset-offsets) to the reset's epoch: the leader's commit of this
	// offset to Kafka, below what Kafka may hold, is the reset's, not a
	// repair (like every recorded offset, it is committed wherever Kafka
	// holds another).
	Reset int64 `json:"reset,omitempty"`
}

// StuckRecord is the value of stuck/<topic>/<partition>/<lo>: the owner of
// the range reports that its watermark has not moved for a while because of
// one unfinished record. It lives under the owner's lease.
type StuckRecord struct {
	V         int       `json:"v"`
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"`
	Offset    int64     `json:"offset"`          // the record holding the watermark
	Key       string    `json:"key"`             // its key ("" if not yet run here)
	Since     time.Time `json:"since"`           // when the watermark last moved
	Attempts  int       `json:"attempts"`        // failed attempts so far
	Error     string    `json:"error,omitempty"` // the last failure
}

// DecodeStuck reads a stuck-range report.
func DecodeStuck(key string, data []byte) (StuckRecord, error) {
	var r StuckRecord
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return StuckRecord{}, err
	}
	if r.Offset < 0 || r.Partition < 0 {
		return StuckRecord{}, &BadValueError{Key: key, Problem: "negative offset or partition"}
	}
	return r, nil
}

// LossRecord is the value of lost/<topic>/<partition>/<lo>/<log start>: the
// records of a range that Kafka deleted (retention, DeleteRecords) before the
// range handled them. The owner writes it in the same fenced transaction
// that moves the range's ledger past them. It has no lease: it stays until
// an operator deletes it.
type LossRecord struct {
	V         int       `json:"v"`
	Member    string    `json:"member"`
	Topic     string    `json:"topic"`
	Partition int32     `json:"partition"`
	Lo        uint64    `json:"lo"` // the range that lost the records
	Hi        uint64    `json:"hi"`
	At        time.Time `json:"at"`
	ledger.Loss
}

// DecodeLoss reads a loss report of group g and checks it against its key.
func DecodeLoss(g Group, key string, data []byte) (LossRecord, error) {
	return decodeLoss(g.Keys(), key, data)
}

func decodeLoss(s Keys, key string, data []byte) (LossRecord, error) {
	var r LossRecord
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return LossRecord{}, err
	}
	topic, part, lo, start, err := ParseLostKey(s.Lost(), key)
	if err != nil {
		return LossRecord{}, &BadValueError{Key: key, Problem: err.Error()}
	}
	if r.Topic != topic || r.Partition != part || r.Lo != lo || r.LogStart != start || r.Lo >= r.Hi {
		return LossRecord{}, &BadValueError{Key: key, Problem: fmt.Sprintf("report of %s/%d [%d,%d) log start %d does not match its key", r.Topic, r.Partition, r.Lo, r.Hi, r.LogStart)}
	}
	if err := r.Loss.Check(); err != nil {
		return LossRecord{}, &BadValueError{Key: key, Problem: err.Error()}
	}
	return r, nil
}

// Encode is v's stored form: its JSON. It panics if v does not encode,
// which no record of this package can.
func Encode(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("coord: encode %T: %v", v, err))
	}
	return string(b)
}

// decodeStrict decodes one JSON value with no unknown fields and checks its
// version.
func decodeStrict(key string, data []byte, v any, version func() int) error {
	if err := strictjson.Decode(data, v); err != nil {
		return &BadValueError{Key: key, Problem: err.Error()}
	}
	if got := version(); got != RecordVersion {
		return &BadValueError{Key: key, Problem: fmt.Sprintf("format version %d, this build reads version %d", got, RecordVersion)}
	}
	return nil
}

// DecodeRange reads a range record of group g and checks it against its
// key. rev is the revision the value was written at (its ModRevision), or 0
// if not known.
func DecodeRange(g Group, key string, data []byte, rev int64) (RangeRecord, error) {
	return decodeRange(g.Keys(), key, data, rev)
}

func decodeRange(s Keys, key string, data []byte, rev int64) (RangeRecord, error) {
	var r RangeRecord
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return RangeRecord{}, err
	}
	topic, part, lo, err := ParseRangeKey(s.Ranges(), key)
	if err != nil {
		return RangeRecord{}, &BadValueError{Key: key, Problem: err.Error()}
	}
	bad := func(format string, a ...any) (RangeRecord, error) {
		return RangeRecord{}, &BadValueError{Key: key, Problem: fmt.Sprintf(format, a...)}
	}
	switch {
	case r.Topic != topic || r.Partition != part || r.Lo != lo:
		return bad("value names %s/%d from hash %d, the key says %s/%d from %d", r.Topic, r.Partition, r.Lo, topic, part, lo)
	case r.Range().Valid() != nil:
		return bad("%v", r.Range().Valid())
	case CheckName("owner", r.Owner) != nil:
		return bad("%v", CheckName("owner", r.Owner))
	case r.State != StateActive && r.State != StateRevoking && r.State != StateReleased:
		return bad("unknown state %q (want %s, %s or %s)", r.State, StateActive, StateRevoking, StateReleased)
	case r.Gen < 0 || r.Gen > maxGeneration:
		return bad("generation %d is outside 0..%d", r.Gen, maxGeneration)
	case r.DrainMs < 0 || r.DrainMs > maxDrainMs:
		return bad("drain budget %dms is outside 0..%dms", r.DrainMs, maxDrainMs)
	case r.Reset < 0:
		return bad("negative reset epoch %d", r.Reset)
	}
	if err := checkEpoch(key, r.Reset, rev); err != nil {
		return RangeRecord{}, err
	}
	return r, nil
}

// DecodeMember reads a member registration of group g.
func DecodeMember(g Group, key string, data []byte) (MemberInfo, error) {
	return decodeMember(g.Keys(), key, data)
}

func decodeMember(s Keys, key string, data []byte) (MemberInfo, error) {
	var m MemberInfo
	if err := decodeStrict(key, data, &m, func() int { return m.V }); err != nil {
		return MemberInfo{}, err
	}
	if key != s.Member(m.ID) {
		return MemberInfo{}, &BadValueError{Key: key, Problem: fmt.Sprintf("value names member %q", m.ID)}
	}
	// The one rule for names, as a range record checks its owner: a member
	// that could own no range is no member, or the leader would assign to
	// it, refuse the result as damaged and assign again, forever.
	if err := CheckName("member id", m.ID); err != nil {
		return MemberInfo{}, &BadValueError{Key: key, Problem: err.Error() + "; not counted as a member"}
	}
	if m.Weight <= 0 {
		return MemberInfo{}, &BadValueError{Key: key, Problem: fmt.Sprintf("weight %d must be positive", m.Weight)}
	}
	if m.Weight > assign.MaxWeight {
		return MemberInfo{}, &BadValueError{Key: key, Problem: fmt.Sprintf("weight %d is above the limit %d", m.Weight, assign.MaxWeight)}
	}
	return m, nil
}

// DecodeGeneration reads the generation record.
func DecodeGeneration(key string, data []byte) (GenerationRecord, error) {
	var g GenerationRecord
	if err := decodeStrict(key, data, &g, func() int { return g.V }); err != nil {
		return GenerationRecord{}, err
	}
	if g.Generation < 0 || g.Generation > maxGeneration {
		return GenerationRecord{}, &BadValueError{Key: key, Problem: fmt.Sprintf("generation %d is outside 0..%d", g.Generation, maxGeneration)}
	}
	return g, nil
}

// DecodeCommit reads a commit record. rev is the revision the value was
// written at (its ModRevision), or 0 if not known.
func DecodeCommit(key string, data []byte, rev int64) (CommitRecord, error) {
	var c CommitRecord
	if err := decodeStrict(key, data, &c, func() int { return c.V }); err != nil {
		return CommitRecord{}, err
	}
	if c.Reset < 0 {
		return CommitRecord{}, &BadValueError{Key: key, Problem: fmt.Sprintf("negative reset epoch %d", c.Reset)}
	}
	if c.Offset < 0 {
		return CommitRecord{}, &BadValueError{Key: key, Problem: fmt.Sprintf("negative offset %d", c.Offset)}
	}
	if err := checkEpoch(key, c.Reset, rev); err != nil {
		return CommitRecord{}, err
	}
	return c, nil
}
