package schema

import (
	"fmt"

	"github.com/keyshare/keyshare/internal/textsafe"
	"github.com/keyshare/keyshare/ledger"
)

// Bounds of a HotKeyNames value. A load report lists at most
// assign.MaxHotKeys keys per range; 1,024 names cover 256 ranges' worth,
// and the busiest keys first, so the value stays under 150 KB whatever
// a member owns (etcd takes values up to 1.5 MiB).
const (
	// MaxHotKeyNames is the most names one value holds.
	MaxHotKeyNames = 1024
	// HotKeyBytes is how many bytes of a key a member keeps and shows
	// (textsafe.Head): enough to tell keys apart on a dashboard.
	HotKeyBytes = 64
	// maxHotKeyText bounds a name as stored: HotKeyBytes of escaped text
	// and the length note of a cut key ("... (N bytes)").
	maxHotKeyText = HotKeyBytes + 32
)

// NotableHotKey says whether a key of a load report's hot list, busy
// keyBusy worker-seconds per second in a range busy rangeBusy, is shown
// to operators by name: at least 1% of the range's busy time, or a tenth
// of a worker. The summary lists up to assign.MaxHotKeys keys by their
// guaranteed time, which with many keys of equal weight is a record's
// worth each: listed, and different every report, but not hot.
func NotableHotKey(keyBusy, rangeBusy float64) bool {
	return keyBusy >= rangeBusy/100 || keyBusy >= 0.1
}

// HotKeyNames is what a member keeps beside its load report, under
// hotkeys/<member-id>: the keys behind the hashes the report's ranges
// list as hot, for operators (keyshare status, the member's metrics). A
// key of its own, not a field of LoadReport (whose fields are frozen for
// its version: a leader of an earlier release would refuse every report
// of a member that added one) nor a key under load/ (which such a leader
// reads whole, and would warn about); docs/upgrades.md.
type HotKeyNames struct {
	V      int          `json:"v"`
	Member string       `json:"member"`
	Keys   []HotKeyName `json:"keys"`
}

// HotKeyName is the key of one hot hash of a partition.
type HotKeyName struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Hash      uint64 `json:"hash"`
	// Key is the record key's first HotKeyBytes bytes, escaped and cut
	// for display (textsafe.Head): printable text only, so it breaks
	// neither a terminal, a table, a metric label nor JSON.
	Key string `json:"key"`
}

// DecodeHotKeys reads a member's hot key names, refusing a value that is
// not what a member writes: too many names, a name twice, a hash outside
// the hash space, or key text that is long or holds an unprintable rune
// (a raw control or bidi character, invalid UTF-8).
func DecodeHotKeys(key string, data []byte) (HotKeyNames, error) {
	var h HotKeyNames
	if err := decodeStrict(key, data, &h, func() int { return h.V }); err != nil {
		return HotKeyNames{}, err
	}
	if err := h.Check(); err != nil {
		return HotKeyNames{}, &BadValueError{Key: key, Problem: err.Error()}
	}
	return h, nil
}

// Check reports the first thing in h a member would not write.
func (h HotKeyNames) Check() error {
	if h.Member == "" {
		return fmt.Errorf("hot key names without a member")
	}
	if len(h.Keys) > MaxHotKeyNames {
		return fmt.Errorf("%d hot key names: want at most %d", len(h.Keys), MaxHotKeyNames)
	}
	type name struct {
		topic     string
		partition int32
		hash      uint64
	}
	seen := make(map[name]bool, len(h.Keys))
	for _, k := range h.Keys {
		n := name{k.Topic, k.Partition, k.Hash}
		switch {
		case k.Topic == "" || k.Partition < 0 || k.Hash >= ledger.HashSpace:
			return fmt.Errorf("hot key of %s/%d hash %d: not a partition's hash", textsafe.Quote(k.Topic), k.Partition, k.Hash)
		case seen[n]:
			return fmt.Errorf("hot key of %s/%d hash %d named twice", textsafe.Quote(k.Topic), k.Partition, k.Hash)
		case len(k.Key) > maxHotKeyText || textsafe.Escape(k.Key) != k.Key:
			return fmt.Errorf("hot key of %s/%d hash %d: key text %s: want at most %d printable bytes, as textsafe escapes them", textsafe.Quote(k.Topic), k.Partition, k.Hash, textsafe.Quote(k.Key), maxHotKeyText)
		}
		seen[n] = true
	}
	return nil
}
