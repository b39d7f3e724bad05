package loadgen

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// records draws the keys of a run and numbers each key's records. The
// same seed draws the same keys in the same order; firstSeq is the SEQ of
// each key's first record, so that a run can go on from an earlier one
// without writing the same values again.
type records struct {
	rng  *rand.Rand
	zipf *rand.Zipf // nil: keys uniform
	keys int
	seq  []int
}

func newRecords(seed uint64, keys int, zipf float64, firstSeq int) *records {
	r := &records{rng: rand.New(rand.NewPCG(seed, 2)), keys: keys, seq: make([]int, keys)}
	if zipf > 0 {
		r.zipf = rand.NewZipf(r.rng, zipf, 1, uint64(keys-1))
	}
	for k := range r.seq {
		r.seq[k] = firstSeq
	}
	return r
}

// next returns the next record's key, "key-K", and value, "key-K:SEQ".
func (r *records) next() (key, value []byte) {
	k := r.rng.IntN(r.keys)
	if r.zipf != nil {
		k = int(r.zipf.Uint64())
	}
	key = fmt.Appendf(nil, "key-%d", k)
	value = fmt.Appendf(nil, "key-%d:%d", k, r.seq[k])
	r.seq[k]++
	return key, value
}

// nextSeq is the first SEQ no key has used yet: where a following run
// starts for its values to be new.
func (r *records) nextSeq() int {
	return slices.Max(r.seq)
}
