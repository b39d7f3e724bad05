package admin

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// Partitioner names how a producer chose a keyed record's partition, so
// that DescribeKey can find the partition of a key from the key alone.
// Producers differ: librdkafka's default (every librdkafka-based client,
// confluent-kafka-go and keyshare produce among them) is consistent_random,
// the Java client's is murmur2.
type Partitioner string

// The partitioners DescribeKey can compute.
const (
	// ConsistentRandom is librdkafka's default: the CRC32 (IEEE) of the
	// key modulo the partition count; an empty or null key goes to a
	// random partition, which no one can compute afterwards.
	ConsistentRandom Partitioner = "consistent_random"
	// CRC32 is librdkafka's "consistent": the CRC32 of the key, an empty
	// key included (CRC32 of nothing is 0: partition 0).
	CRC32 Partitioner = "crc32"
	// Murmur2 is the Java client's default (and librdkafka's "murmur2"):
	// murmur2 of the key with Kafka's seed, its sign bit cleared, modulo
	// the partition count.
	Murmur2 Partitioner = "murmur2"
)

// ErrRandomPartition: the partitioner places this key (an empty one) at
// random; only the partition itself can say where it is.
var ErrRandomPartition = errors.New("admin: the partitioner places an empty key at random")

// ParsePartitioner reads a partitioner's name: consistent_random, crc32
// (librdkafka's name "consistent" too) or murmur2.
func ParsePartitioner(s string) (Partitioner, error) {
	switch s {
	case string(ConsistentRandom):
		return ConsistentRandom, nil
	case string(CRC32), "consistent":
		return CRC32, nil
	case string(Murmur2):
		return Murmur2, nil
	}
	return "", fmt.Errorf("partitioner %q: want consistent_random (librdkafka's default), murmur2 (Java's default) or crc32", s)
}

// Partition returns the partition p places key in, among n partitions.
func (p Partitioner) Partition(key []byte, n int32) (int32, error) {
	if n <= 0 {
		return 0, fmt.Errorf("admin: %d partitions: want at least 1", n)
	}
	switch p {
	case ConsistentRandom:
		if len(key) == 0 {
			return 0, ErrRandomPartition
		}
		return int32(crc32.ChecksumIEEE(key) % uint32(n)), nil
	case CRC32:
		return int32(crc32.ChecksumIEEE(key) % uint32(n)), nil
	case Murmur2:
		return int32((murmur2(key) & 0x7fffffff) % uint32(n)), nil
	}
	return 0, fmt.Errorf("admin: unknown partitioner %q", string(p))
}

// murmur2 is Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2):
// MurmurHash2, 32 bits, seed 0x9747b28c, little-endian blocks.
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	n := len(data)
	h := uint32(seed) ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
