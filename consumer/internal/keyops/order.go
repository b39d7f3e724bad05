package keyops

// CopyOrder keeps an unpark's parked copies in their records' order.
// Fencing tokens only grow from one holder of a key's hash to the next,
// and each holder writes its copies in order, so a copy under a token
// below the newest handled so far was written late by a member that had
// lost the range, behind the next owner's copies, which park that record
// again in its place: it is passed over, not run out of order.
type CopyOrder struct {
	newest int64 // the highest token handled; -1 before the first
}

// NewCopyOrder is the order of a prelude that has handled no copy yet.
func NewCopyOrder() CopyOrder { return CopyOrder{newest: -1} }

// Admit reports whether a copy written under token is handled (true,
// and token is then the newest), or passed over as written late.
func (o *CopyOrder) Admit(token int64) bool {
	if token < o.newest {
		return false
	}
	o.newest = token
	return true
}

// Newest is the highest token handled, -1 before the first.
func (o CopyOrder) Newest() int64 { return o.newest }
