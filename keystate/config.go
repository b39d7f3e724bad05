package keystate

import "fmt"

// EntryOverhead is the fixed number of bytes a table counts for each key on
// top of the key's and the value's bytes: the map slot (the key's string
// header and the value's slice header, two int64s and a flag), its share of
// the map's buckets at their usual load, and the two allocations' headers.
// BenchmarkRestore reports the bytes a restore really allocates per key, to
// keep this figure honest.
const EntryOverhead = 96

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
