package keystate

import "fmt"

// EntryOverhead is the fixed number of bytes a table counts for each key on
// top of the key's and the value's bytes. A key's map slot takes 64 bytes
// (the key's string header, the value's slice header, two int64s and two
// flags); a Go map keeps between 7/16 and 7/8 of its slots in use, so a
// slot costs up to about 147 bytes just after the map grew; and the key's
// and the value's allocations are rounded up to the allocator's size
// classes. BenchmarkRestore reports the heap a restored table really holds
// per key next to what it counts, to keep this figure honest.
const EntryOverhead = 160

// Config bounds a table and a restore.
type Config struct {
	// MaxBytes bounds the bytes a table counts: for each key its length,
	// its value's length and EntryOverhead (a deleted key counts its
	// length and EntryOverhead, for the skip rule). A change or a restore
	// that would cross it is an error, never a silent drop. Default
	// 256 MiB.
	MaxBytes int64
}

// DefaultMaxBytes is Config.MaxBytes's default.
const DefaultMaxBytes = 256 << 20

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{MaxBytes: DefaultMaxBytes} }

// Validate reports a setting that cannot work.
func (c Config) Validate() error {
	if c.MaxBytes < EntryOverhead {
		return fmt.Errorf("keystate: MaxBytes %d is below one key's overhead of %d bytes: set it to the memory a range's state may take (default %d)", c.MaxBytes, EntryOverhead, DefaultMaxBytes)
	}
	return nil
}

// size is the bytes a table counts for one key.
func size(key, value []byte) int64 { return int64(len(key)) + int64(len(value)) + EntryOverhead }
