package schedule

import "iter"

// Key is what a scheduler orders jobs by: comparable, with a hash that
// equal keys share. Keys of equal hash need not be equal: the scheduler
// tells them apart by ==, so a hash that collides costs time, never
// order. A key that carries a hash it already has (the consumer's carries
// its record key's) spares the scheduler hashing its fields.
type Key interface {
	comparable
	Hash() uint64
}

// keyTable finds a key's queue by the key's hash. A map keyed by a uint64
// costs a fraction of one keyed by the consumer's key (a struct of two
// strings, hashed field by field at every lookup): the scheduler looks a
// key up for every job submitted and often deletes one when a key goes
// idle, and those map operations were about a sixth of a member's CPU
// (docs/benchmarks.md).
type keyTable[K Key, J any] struct {
	// byHash holds the first queue of each hash; queues of keys with the
	// same hash chain through their sameHash.
	byHash map[uint64]*keyQueue[K, J]
	n      int // queues in the table
}

func newKeyTable[K Key, J any]() keyTable[K, J] {
	return keyTable[K, J]{byHash: make(map[uint64]*keyQueue[K, J])}
}

// get returns k's queue, or nil.
func (t *keyTable[K, J]) get(k K) *keyQueue[K, J] {
	q := t.byHash[k.Hash()]
	for q != nil && q.key != k {
		q = q.sameHash
	}
	return q
}

// put adds q, whose key has no queue in the table.
func (t *keyTable[K, J]) put(q *keyQueue[K, J]) {
	h := q.key.Hash()
	q.sameHash = t.byHash[h]
	t.byHash[h] = q
	t.n++
}

// remove takes q, which is in the table, out of it.
func (t *keyTable[K, J]) remove(q *keyQueue[K, J]) {
	h := q.key.Hash()
	first := t.byHash[h]
	switch {
	case first == q && q.sameHash == nil:
		delete(t.byHash, h)
	case first == q:
		t.byHash[h] = q.sameHash
	default:
		prev := first
		for prev.sameHash != q {
			prev = prev.sameHash
		}
		prev.sameHash = q.sameHash
	}
	q.sameHash = nil
	t.n--
}

// len is the number of queues in the table.
func (t *keyTable[K, J]) len() int { return t.n }

// all yields every queue in the table, in no particular order.
func (t *keyTable[K, J]) all() iter.Seq[*keyQueue[K, J]] {
	return func(yield func(*keyQueue[K, J]) bool) {
		for _, q := range t.byHash {
			for ; q != nil; q = q.sameHash {
				if !yield(q) {
					return
				}
			}
		}
	}
}
