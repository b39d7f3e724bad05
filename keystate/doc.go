// Package keystate is the format and the rules of a key's state that moves
// with its hash range: the changelog entry a change of state is appended as,
// the restore rule by which a range's new owner rebuilds the state from the
// changelog, the skip rule by which no record changes the state twice, and
// the bounded table that holds a range's state, in memory or behind Slots
// on a disk. Package statestore applies them to a member's handler.
//
// A handler reads and replaces the state of its record's key. Each change is
// appended to a compacted changelog topic, in the partition of the input
// record's number, keyed by the record's key, with the input offset it
// applied and the range's fencing token in its headers; a deletion is a
// tombstone. The owner of a range appends a change, and only once the append
// is acknowledged completes the record in its ledger.
//
// A member that takes a range restores first, from the start of its
// changelog partition to the end offset it read when it began:
//
//	rs, err := keystate.NewRestore(r, keystate.DefaultConfig())
//	for each changelog record m up to the end offset {
//		e, err := keystate.Decode(m.Key, m.Value, m.Value == nil, headersOf(m))
//		if err != nil {
//			return err // names the record's key, the field and its value
//		}
//		if err := rs.Add(e); err != nil {
//			return err // the range's state does not fit MaxBytes
//		}
//	}
//	t, repairs := rs.Table(fence.Token)
//	// append each of repairs, then run the range's records:
//	if t.Seen(m.Key, offset) {
//		// applied already (a re-run after a crash): complete it, run nothing
//	}
//	old, _ := t.Get(m.Key)
//	e, err := t.Put(m.Key, handle(m, old), offset, fence.Token)
//	// append e with keystate.Headers(e); on its ack, complete the record
//
// While it holds the range the owner reads on in its changelog partition and
// passes each entry to Observe with its token, which keeps the table what a
// restore would give and returns the entry to append again when a member
// that lost the range wrote a change late that compaction would keep in
// place of the key's state.
//
// Why the rules hold, and what they need of the topic's settings
// (min.compaction.lag.ms, delete.retention.ms), is argued in docs/state.md;
// the model test checks them against random histories of handoffs, crashes,
// members appending after they lost the range, splits, merges and
// compactions.
//
// Everything here is pure code with no I/O: it imports only the standard
// library, package ledger, whose key hash and hash ranges it uses, and
// keyshare's quoting of outside text for its error messages.
package keystate
