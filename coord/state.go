package coord

import (
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/state"
)

// What a group keeps in etcd, its records and their decoding, and the
// snapshot decoded from them are package state's: pure code with no I/O.
// They are part of coord's API (sessions, the leader, admin and status read
// them), so coord names them too; these are the same types.
type (
	Group              = state.Group
	Snapshot           = state.Snapshot
	Member             = state.Member
	RangeState         = state.RangeState
	Assignment         = state.Assignment
	RangeRecord        = state.RangeRecord
	MemberInfo         = state.MemberInfo
	SubscriptionRecord = state.SubscriptionRecord
	LeaveRecord        = state.LeaveRecord
	GenerationRecord   = state.GenerationRecord
	CommitRecord       = state.CommitRecord
	StuckRecord        = state.StuckRecord
	LossRecord         = state.LossRecord
	HandoffPlan        = state.HandoffPlan
	PlannedHandoff     = state.PlannedHandoff
	LoadReport         = state.LoadReport
	ReceivedLoad       = state.ReceivedLoad
	PauseRecord        = state.PauseRecord
	TopicRecord        = state.TopicRecord
)

// DefaultPrefix is the etcd prefix under which groups live unless
// configured otherwise (Config.Prefix): state.DefaultPrefix.
const DefaultPrefix = state.DefaultPrefix

// Range states: state's.
const (
	StateActive   = state.StateActive
	StateRevoking = state.StateRevoking
	StateReleased = state.StateReleased
)

// Topic record states: state's.
const (
	TopicActive    = state.TopicActive
	TopicResetting = state.TopicResetting
)

// DecodeRange is state.DecodeRange.
func DecodeRange(g Group, key string, data []byte, rev int64) (RangeRecord, error) {
	return state.DecodeRange(g, key, data, rev)
}

// DecodeMember is state.DecodeMember.
func DecodeMember(g Group, key string, data []byte) (MemberInfo, error) {
	return state.DecodeMember(g, key, data)
}

// DecodeGeneration is state.DecodeGeneration.
func DecodeGeneration(key string, data []byte) (GenerationRecord, error) {
	return state.DecodeGeneration(key, data)
}

// DecodeCommit is state.DecodeCommit.
func DecodeCommit(key string, data []byte, rev int64) (CommitRecord, error) {
	return state.DecodeCommit(key, data, rev)
}

// DecodeStuck is state.DecodeStuck.
func DecodeStuck(key string, data []byte) (StuckRecord, error) { return state.DecodeStuck(key, data) }

// DecodeLoss is state.DecodeLoss.
func DecodeLoss(g Group, key string, data []byte) (LossRecord, error) {
	return state.DecodeLoss(g, key, data)
}

// DecodeLoad is state.DecodeLoad.
func DecodeLoad(key string, data []byte) (LoadReport, error) { return state.DecodeLoad(key, data) }

// DecodePause is state.DecodePause.
func DecodePause(key string, data []byte) (PauseRecord, error) { return state.DecodePause(key, data) }

// DecodeTopic is state.DecodeTopic.
func DecodeTopic(key string, data []byte) (TopicRecord, error) { return state.DecodeTopic(key, data) }

// recordVersion is the version of every JSON value coord writes.
const recordVersion = state.RecordVersion

// maxDrain bounds a drain budget (Config.DrainTimeout).
const maxDrain = state.MaxDrain

func mustJSON(v any) string { return state.Encode(v) }

// storedHandoff is a handoff plan as read from etcd.
type storedHandoff = state.StoredHandoff

// groupOfSchema is the Group whose keys schema s names.
func groupOfSchema(s keys.Schema) Group { return Group{Prefix: s.Prefix(), Name: s.Group()} }

// schemaOf is the key schema of group g (state's Group.Root names the same
// root).
func schemaOf(g Group) keys.Schema {
	prefix := g.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return keys.New(prefix, g.Name)
}

func decodeRange(s keys.Schema, key string, data []byte, rev int64) (RangeRecord, error) {
	return state.DecodeRange(groupOfSchema(s), key, data, rev)
}

func decodeMember(s keys.Schema, key string, data []byte) (MemberInfo, error) {
	return state.DecodeMember(groupOfSchema(s), key, data)
}

// groupKVs is what ReadSnapshot reads, in its order: members, ranges,
// ledger, commits, generation, stuck, lost (state.GroupKVs).
type groupKVs [7][]*mvccpb.KeyValue

// buildSnapshot decodes and classifies the group's keys read at rev. It does
// no I/O.
func buildSnapshot(s keys.Schema, rev int64, r groupKVs) *Snapshot {
	return buildSnapshotMemo(s, rev, r, nil)
}

// buildSnapshotMemo is state.BuildSnapshot on keys as etcd's client returns
// them.
func buildSnapshotMemo(s keys.Schema, rev int64, r groupKVs, memo *state.DecodeMemo) *Snapshot {
	var kvs state.GroupKVs
	for i, list := range r {
		kvs[i] = make([]state.KeyValue, len(list))
		for j, kv := range list {
			kvs[i][j] = state.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}
		}
	}
	return state.BuildSnapshot(groupOfSchema(s), rev, kvs, memo)
}
