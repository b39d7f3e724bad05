package statestore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/hashicorp/go-hclog"

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
	if key == nil {
		return KeyState{}, keystate.ErrNullKey
	}
	if kafkaCfg["bootstrap.servers"] == nil {
		return KeyState{}, errors.New("statestore: ReadKey: the Kafka settings have no bootstrap.servers")
	}
	h := uint64(ledger.Hash(key, 0))
	rs, err := keystate.NewRestore(ledger.HashRange{Lo: h, Hi: h + 1}, keystate.DefaultConfig())
	if err != nil {
		return KeyState{}, err
	}
	s := &Store{cfg: Config{Kafka: kafkaCfg}.withDefaults()}
	s.log = s.cfg.Logger
	var pr restoreProgress
	if err := s.readChangelog(ctx, changelog, partition, &pr, rs.Add); err != nil {
		return KeyState{}, fmt.Errorf("statestore: read the state of key %q: %w", key, err)
	}
	table, _, err := rs.Table(0)
	if err != nil {
		return KeyState{}, err
	}
	ks := KeyState{Changelog: changelog, Partition: partition, ReadTo: pr.end.Load()}
	if e, ok, _ := table.Entry(key); ok {
		ks.Found, ks.Deleted, ks.Value, ks.Applied, ks.Fence = true, e.Deleted, e.Value, e.Applied, e.Fence
	}
	return ks, nil
}

// DeleteKey deletes key's state: it appends a tombstone that wins over the
// key's last change under the restore rule, by carrying the same applied
// offset and fencing token fence, which must be above the change's. It
// returns the state deleted. A key without state is an error.
//
// It is for an operator, and only while no member runs: fence must be
// above the token of every grant a member holds (the etcd revision now
// does it, since every later grant is a range record written after it),
// or the owner of the key's range would find the key under a token above
// its own and refuse to change it again. A paused group's members keep
// their grants, so pausing is not enough.
func DeleteKey(ctx context.Context, kafkaCfg kafka.ConfigMap, changelog string, partition int32, key []byte, fence int64) (KeyState, error) {
	st, err := ReadKey(ctx, kafkaCfg, changelog, partition, key)
	if err != nil {
		return KeyState{}, err
	}
	switch {
	case !st.Found || st.Deleted:
		return st, fmt.Errorf("statestore: key %q has no state in %s/%d: nothing to delete", key, changelog, partition)
	case fence <= st.Fence:
		return st, fmt.Errorf("statestore: delete key %q: token %d is not above the token %d of its last change", key, fence, st.Fence)
	}
	p, err := newAppender(kafkaCfg, hclog.NewNullLogger())
	if err != nil {
		return st, err
	}
	defer p.Close()
	var inFlight sync.WaitGroup
	tomb := keystate.Entry{Key: key, Deleted: true, Applied: st.Applied, Fence: fence}
	if err := appendEntry(ctx, p, changelog, partition, tomb, &inFlight); err != nil {
		return st, err
	}
	return st, nil
}
