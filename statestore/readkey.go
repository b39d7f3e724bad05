package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"

	"github.com/keyshare/keyshare/keystate"
	"github.com/keyshare/keyshare/ledger"
)

// KeyState is one key's state as its changelog partition holds it: what a
// restore of the key's range would give it.
type KeyState struct {
	Changelog string
	Partition int32
	Found     bool // the changelog holds a change of the key
	Deleted   bool // its winning change is a tombstone
	Value     []byte
	Applied   int64 // the input offset of the record that made the change
	Fence     int64 // the fencing token it was made under
	ReadTo    int64 // the partition's end offset, where the read stopped
}

// ReadKey reads key's state from partition of changelog, with the Kafka
// connection settings kafkaCfg, by the restore rule: the whole partition
// is read, keeping only the key's changes. It is for an operator's look at
// one key (keyshare key describe --state); a running member reads its
// ranges' states itself.
func ReadKey(ctx context.Context, kafkaCfg kafka.ConfigMap, changelog string, partition int32, key []byte) (KeyState, error) {
	return readKey(ctx, kafkaCfg, changelog, partition, key, nil)
}

// readKey is ReadKey that also passes each of the key's entries, in
// changelog order, to each when it is not nil.
func readKey(ctx context.Context, kafkaCfg kafka.ConfigMap, changelog string, partition int32, key []byte, each func(keystate.Entry)) (KeyState, error) {
	if key == nil {
		return KeyState{}, keystate.ErrNullKey
	}
	if kafkaCfg["bootstrap.servers"] == nil {
		return KeyState{}, errors.New("statestore: ReadKey: the Kafka settings have no bootstrap.servers")
	}
	rs, err := keystate.NewRestore(hashOf(key), keystate.DefaultConfig())
	if err != nil {
		return KeyState{}, err
	}
	var pr restoreProgress
	if err := toolStore(kafkaCfg).readChangelog(ctx, changelog, partition, &pr, func(e keystate.Entry) error {
		if each != nil && bytes.Equal(e.Key, key) {
			each(e)
		}
		return rs.Add(e)
	}); err != nil {
		return KeyState{}, fmt.Errorf("statestore: read the state of key %q: %w", key, err)
	}
	table, _, err := rs.Table(0)
	if err != nil {
		return KeyState{}, err
	}
	ks := KeyState{Changelog: changelog, Partition: partition, ReadTo: pr.end.Load()}
	e, ok, err := table.Entry(key)
	if err != nil {
		return KeyState{}, err
	}
	if ok {
		ks.Found, ks.Deleted, ks.Value, ks.Applied, ks.Fence = true, e.Deleted, e.Value, e.Applied, e.Fence
	}
	return ks, nil
}

// hashOf is the range of key's hash alone: a restore of it keeps only the
// key.
func hashOf(key []byte) ledger.HashRange {
	h := uint64(ledger.Hash(key, 0))
	return ledger.HashRange{Lo: h, Hi: h + 1}
}

// toolStore is a Store with no group, for an operator's tool that reads a
// changelog with the Store's reader.
func toolStore(kafkaCfg kafka.ConfigMap) *Store {
	s := &Store{cfg: Config{Kafka: kafkaCfg}.withDefaults()}
	s.log = s.cfg.Logger
	return s
}
