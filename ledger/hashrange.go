package ledger

import "fmt"

// HashSpace is the size of the key-hash space: hashes are 32-bit, so every
// partition's hash space is [0, HashSpace).
const HashSpace uint64 = 1 << 32

// HashRange is the half-open interval [Lo, Hi) of key hashes. Hi is a uint64
// so that the full space [0, 1<<32) can be written down.
type HashRange struct {
	Lo uint64 `json:"lo"`
	Hi uint64 `json:"hi"`
}

// Full is the whole hash space of a partition.
var Full = HashRange{Lo: 0, Hi: HashSpace}

// Contains reports whether hash h lies in r.
func (r HashRange) Contains(h uint32) bool {
	return uint64(h) >= r.Lo && uint64(h) < r.Hi
}

// Len is the number of hashes in r.
func (r HashRange) Len() uint64 { return r.Hi - r.Lo }

// Empty reports whether r holds no hash.
func (r HashRange) Empty() bool { return r.Hi <= r.Lo }

// Intersect returns the common part of r and o (possibly empty).
func (r HashRange) Intersect(o HashRange) HashRange {
	lo, hi := max(r.Lo, o.Lo), min(r.Hi, o.Hi)
	if hi < lo {
		hi = lo
	}
	return HashRange{Lo: lo, Hi: hi}
}

// Minus returns the parts of r outside o, in order: none, one or two
// non-empty ranges.
func (r HashRange) Minus(o HashRange) []HashRange {
	in := r.Intersect(o)
	if in.Empty() {
		if r.Empty() {
			return nil
		}
		return []HashRange{r}
	}
	var out []HashRange
	for _, p := range []HashRange{{Lo: r.Lo, Hi: in.Lo}, {Lo: in.Hi, Hi: r.Hi}} {
		if !p.Empty() {
			out = append(out, p)
		}
	}
	return out
}

// Valid reports an error if r is empty or leaves the hash space.
func (r HashRange) Valid() error {
	if r.Lo >= r.Hi || r.Hi > HashSpace {
		return fmt.Errorf("hash range %s: want lo < hi <= %d", r, HashSpace)
	}
	return nil
}

func (r HashRange) String() string { return fmt.Sprintf("[%d,%d)", r.Lo, r.Hi) }
