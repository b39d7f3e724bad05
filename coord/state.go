package coord

import (
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/keyshare/keyshare/schema"
)

// recordVersion is the version of every JSON value coord writes.
const recordVersion = schema.RecordVersion

// maxDrain bounds a drain budget (Config.DrainTimeout).
const maxDrain = schema.MaxDrain

func mustJSON(v any) string { return schema.Encode(v) }

// storedHandoff is a handoff plan as read from etcd.
type storedHandoff = schema.StoredHandoff

// groupOfSchema is the Group whose keys schema s names.
func groupOfSchema(s schema.Keys) schema.Group {
	return schema.Group{Prefix: s.Prefix(), Name: s.Group()}
}

// schemaOf is the key schema of group g (state's Group.Root names the same
// root).
func schemaOf(g schema.Group) schema.Keys { return schema.Group{Prefix: g.Prefix, Name: g.Name}.Keys() }

func decodeRange(s schema.Keys, key string, data []byte, rev int64) (schema.RangeRecord, error) {
	return schema.DecodeRange(groupOfSchema(s), key, data, rev)
}

func decodeMember(s schema.Keys, key string, data []byte) (schema.MemberInfo, error) {
	return schema.DecodeMember(groupOfSchema(s), key, data)
}

// groupKVs is what ReadSnapshot reads, in its order: members, ranges,
// ledger, commits, generation, stuck, lost (state.GroupKVs).
type groupKVs [7][]*mvccpb.KeyValue

// buildSnapshot decodes and classifies the group's keys read at rev. It does
// no I/O.
func buildSnapshot(s schema.Keys, rev int64, r groupKVs) *schema.Snapshot {
	return buildSnapshotMemo(s, rev, r, nil)
}

// buildSnapshotMemo is state.BuildSnapshot on keys as etcd's client returns
// them.
func buildSnapshotMemo(s schema.Keys, rev int64, r groupKVs, memo *schema.DecodeMemo) *schema.Snapshot {
	var kvs schema.GroupKVs
	for i, list := range r {
		kvs[i] = make([]schema.KeyValue, len(list))
		for j, kv := range list {
			kvs[i][j] = schema.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}
		}
	}
	return schema.BuildSnapshot(groupOfSchema(s), rev, kvs, memo)
}
