package coord

import (
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keyshare/keyshare/internal/keys"
	"github.com/keyshare/keyshare/state"
)

// recordVersion is the version of every JSON value coord writes.
const recordVersion = state.RecordVersion

// maxDrain bounds a drain budget (Config.DrainTimeout).
const maxDrain = state.MaxDrain

func mustJSON(v any) string { return state.Encode(v) }

// storedHandoff is a handoff plan as read from etcd.
type storedHandoff = state.StoredHandoff

// groupOfSchema is the Group whose keys schema s names.
func groupOfSchema(s keys.Schema) state.Group {
	return state.Group{Prefix: s.Prefix(), Name: s.Group()}
}

// schemaOf is the key schema of group g (state's Group.Root names the same
// root).
func schemaOf(g state.Group) keys.Schema { return keys.ForGroup(g.Prefix, g.Name) }

func decodeRange(s keys.Schema, key string, data []byte, rev int64) (state.RangeRecord, error) {
	return state.DecodeRange(groupOfSchema(s), key, data, rev)
}

func decodeMember(s keys.Schema, key string, data []byte) (state.MemberInfo, error) {
	return state.DecodeMember(groupOfSchema(s), key, data)
}

// groupKVs is what ReadSnapshot reads, in its order: members, ranges,
// ledger, commits, generation, stuck, lost (state.GroupKVs).
type groupKVs [7][]*mvccpb.KeyValue

// buildSnapshot decodes and classifies the group's keys read at rev. It does
// no I/O.
func buildSnapshot(s keys.Schema, rev int64, r groupKVs) *state.Snapshot {
	return buildSnapshotMemo(s, rev, r, nil)
}

// buildSnapshotMemo is state.BuildSnapshot on keys as etcd's client returns
// them.
func buildSnapshotMemo(s keys.Schema, rev int64, r groupKVs, memo *state.DecodeMemo) *state.Snapshot {
	var kvs state.GroupKVs
	for i, list := range r {
		kvs[i] = make([]state.KeyValue, len(list))
		for j, kv := range list {
			kvs[i][j] = state.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}
		}
	}
	return state.BuildSnapshot(groupOfSchema(s), rev, kvs, memo)
}
