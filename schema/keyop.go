package schema

import (
	"fmt"
	"time"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
)

// Operations on one key (KeyOpRecord.Op).
const (
	// KeyOpSkip: the key's record at Offset, its head, is not handled;
	// its owner dead-letters it (or drops it, with Drop) and the key
	// moves on. One shot: the owner deletes the operation once the
	// record's completion is in the ledger.
	KeyOpSkip = "skip"
	// KeyOpPark: the key's records are not handled but copied, in order,
	// to ParkTopic (same partition number), each counted done once the
	// copy is acknowledged; other keys go on.
	KeyOpPark = "park"
	// KeyOpUnpark: the key's owner first handles the key's records parked
	// in ParkTopic from Next on (a prelude), in order, recording its
	// progress in Next, then deletes the operation; the key's live
	// records wait until then.
	KeyOpUnpark = "unpark"
	// KeyOpReplay: the key's owner handles the key's records from Offset
	// up to ReplayTo again (a prelude on the key's own partition), in
	// order, before the key's next live record, whose offset becomes
	// ReplayTo; its progress is in Next. The ledger is not touched: the
	// committed offset never goes back.
	KeyOpReplay = "replay"
)

// Bounds of a KeyOpRecord.
const (
	// MaxKeyOpKeyBytes bounds the record key an operation names: the key
	// is in the etcd key's name (base64, a third longer) and in the value.
	MaxKeyOpKeyBytes = 1024
	// MaxKeyOpTextBytes bounds the operator's reason and a member's
	// refusal.
	MaxKeyOpTextBytes = 1024
)

// KeyOpRecord is the value of keyops/<topic>/<ppppp>/<hash>/<key-b64url>:
// an operator's operation on one record key, honoured by whichever member
// owns the key's hash now or later. It has no lease: it outlives member
// restarts and range moves until the operation is done (or an operator
// deletes it). A key of its own, which members of earlier releases never
// read (docs/upgrades.md).
type KeyOpRecord struct {
	V         int    `json:"v"`
	Op        string `json:"op"` // KeyOpSkip, KeyOpPark
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// Key is the record key (base64 in JSON); Hash its ledger.Hash.
	Key  []byte `json:"key"`
	Hash uint64 `json:"hash"`
	// Offset is the record a skip is for: the key's head when the
	// operator asked.
	Offset int64 `json:"offset"`
	// Drop: a skipped record is not written to the dead-letter topic.
	Drop bool `json:"drop,omitempty"`
	// ParkTopic is where a park copies the key's records; ParkFrom, the
	// end offset of its partition of the key's partition number when the
	// park was set: the parked records lie at or above it.
	ParkTopic string `json:"park_topic,omitempty"`
	ParkFrom  int64  `json:"park_from,omitempty"`
	// Next is an unpark's or a replay's progress: the records of the
	// partition read below it are handled (or are not the key's). Written
	// by the key's owner, guarded by its ownership of the key's range.
	Next int64 `json:"next,omitempty"`
	// ReplayTo is where a replay stops: the offset of the key's next live
	// record, set by the owner when it begins (0: not yet).
	ReplayTo int64     `json:"replay_to,omitempty"`
	By       string    `json:"by"`               // who asked (user@host)
	Reason   string    `json:"reason,omitempty"` // free text from the operator
	At       time.Time `json:"at"`
	// Refused is why the key's owner could not apply the operation (a
	// skip without Drop on a member with no dead-letter topic), written
	// by that member; the operation stays, and is not applied, until an
	// operator replaces or deletes it.
	Refused string `json:"refused,omitempty"`
}

// DecodeKeyOp reads an operation on one key of group g and checks it
// against its key's name.
func DecodeKeyOp(g Group, key string, data []byte) (KeyOpRecord, error) {
	var r KeyOpRecord
	if err := decodeStrict(key, data, &r, func() int { return r.V }); err != nil {
		return KeyOpRecord{}, err
	}
	if r.Key == nil {
		r.Key = []byte{} // an empty key, as JSON's "" decodes
	}
	if err := r.Check(); err != nil {
		return KeyOpRecord{}, &BadValueError{Key: key, Problem: err.Error()}
	}
	if want := g.Keys().KeyOp(r.Topic, r.Partition, uint32(r.Hash), r.Key); key != want {
		return KeyOpRecord{}, &BadValueError{Key: key, Problem: fmt.Sprintf("the operation's topic, partition and key belong at %s", textsafe.Quote(want))}
	}
	return r, nil
}

// Check reports the first thing in r an operator's command would not
// write: the writers check it before they store it.
func (r KeyOpRecord) Check() error {
	switch {
	case r.Op != KeyOpSkip && r.Op != KeyOpPark && r.Op != KeyOpUnpark && r.Op != KeyOpReplay:
		return fmt.Errorf("operation %s: this build knows %q, %q, %q and %q", textsafe.Quote(r.Op), KeyOpSkip, KeyOpPark, KeyOpUnpark, KeyOpReplay)
	case CheckName("topic", r.Topic) != nil:
		return CheckName("topic", r.Topic)
	case r.Partition < 0:
		return fmt.Errorf("partition %d", r.Partition)
	case len(r.Key) > MaxKeyOpKeyBytes:
		return fmt.Errorf("a key of %d bytes: at most %d", len(r.Key), MaxKeyOpKeyBytes)
	case r.Hash != uint64(ledger.Hash(r.Key, 0)):
		return fmt.Errorf("hash %d is not the key's (%d)", r.Hash, ledger.Hash(r.Key, 0))
	case r.Offset < 0:
		return fmt.Errorf("offset %d", r.Offset)
	case r.Op != KeyOpSkip && r.Drop:
		return fmt.Errorf("drop on a %s", r.Op)
	case (r.Op == KeyOpPark || r.Op == KeyOpUnpark) && (CheckName("parking topic", r.ParkTopic) != nil || r.ParkTopic == r.Topic || r.ParkFrom < 0 || r.Offset != 0):
		return fmt.Errorf("%s of %s from offset %d (offset %d): want a topic other than the key's, offsets 0 or more, no offset", r.Op, textsafe.Quote(r.ParkTopic), r.ParkFrom, r.Offset)
	case (r.Op == KeyOpSkip || r.Op == KeyOpReplay) && (r.ParkTopic != "" || r.ParkFrom != 0):
		return fmt.Errorf("a parking topic on a %s", r.Op)
	case r.Op == KeyOpUnpark && r.Next < r.ParkFrom, r.Op == KeyOpReplay && r.Next < r.Offset, r.Op != KeyOpUnpark && r.Op != KeyOpReplay && r.Next != 0:
		return fmt.Errorf("%s with progress %d (from %d)", r.Op, r.Next, max(r.ParkFrom, r.Offset))
	case r.Op != KeyOpReplay && r.ReplayTo != 0 || r.ReplayTo != 0 && r.ReplayTo < r.Next:
		return fmt.Errorf("%s up to %d with progress %d", r.Op, r.ReplayTo, r.Next)
	case len(r.Reason) > MaxKeyOpTextBytes || len(r.Refused) > MaxKeyOpTextBytes || len(r.By) > MaxKeyOpTextBytes:
		return fmt.Errorf("by, reason or refusal longer than %d bytes", MaxKeyOpTextBytes)
	}
	return nil
}
