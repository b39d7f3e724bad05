// Package ledger keeps the completion state of the key-hash ranges that
// keyshare members own: for each range of a partition, which records have been
// handled. From it come the range's watermark (every record of the range below
// it is done; the partition's lowest one is what gets committed to Kafka) and
// the answer, for each fetched record, whether to run it, skip it, or leave it
// to another range. A new owner that inherits a range's state runs exactly the
// records its predecessor left unfinished; ranges can be split (Clip) and
// joined (Concat) without losing a record or running a finished one again.
//
// Everything here is pure code with no I/O: package coord writes entries to
// etcd (Session.Flush, in transactions guarded by the writer's ownership).
// docs/ledger.md explains the state and why each operation is safe.
//
// An owner of range r keeps one State and feeds it every record it fetches
// from the partition, in offset order, starting at the state's watermark:
//
//	e := ledger.Entry{} // none stored yet
//	if kv != nil {
//		if e, err = ledger.Decode(key, kv.Value, r); err != nil {
//			return err // names the key and what is wrong with it
//		}
//	}
//	st, err := ledger.NewState(r, e, committedOffset)
//	// seek the partition to st.Watermark(), then for each record:
//	h := ledger.Hash(msg.Key, offset)
//	if v, _ := st.Observe(offset, h); v == ledger.Run {
//		handle(msg)
//		err = st.Complete(offset, h)
//	} // Skip, InFlight and Pass need nothing
//
//	// every flush interval, for the ranges whose Version changed,
//	// store st.Entry() (package coord's Session.Flush writes it under
//	// the owner's guard) and remember st.Version().
//
// A State is not safe for concurrent use; an owner serialises Observe and
// Complete (or guards them with a mutex).
package ledger
