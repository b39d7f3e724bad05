package ledger

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Hash returns the key hash of a record: the high 32 bits of the record key's
// XXH64 digest (seed 0). A record with a null key (key == nil) has no order to
// keep, so its offset is hashed instead (as 8 big-endian bytes), which spreads
// unkeyed records over all ranges. An empty, non-null key is a key like any
// other.
//
// The function is part of keyshare's stored format: ranges in etcd are ranges
// of these values, so changing it would move keys between owners on upgrade
// and break per-key order. TestHashGolden pins its values.
func Hash(key []byte, offset int64) uint32 {
	if key == nil {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(offset))
		return uint32(xxhash.Sum64(b[:]) >> 32)
	}
	return uint32(xxhash.Sum64(key) >> 32)
}
