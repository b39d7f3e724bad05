package statestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/keyshare/keyshare/ledger"
)

// Copies: with the state on disk, a range the member gives up stays there
// as a copy, and a range it takes again restores from the copies that hold
// it and the changelog from where their reading stopped, not from the
// changelog's start. docs/state.md argues that such a restore gives what a
// restore from the start gives:
//
//   - a copy holds, for its keys, what a restore up to offset through
//     gives, and the member's own acknowledged changes: the grant's table
//     was restored up to its end offset, then the follower passed it every
//     entry up to through, and each change it made was appended;
//   - the restore rule keeps per key the greatest entry, so reading the
//     entries from through again on top of the copy gives the same state
//     as reading all of them, whichever of them the copy holds already;
//   - a copy is only made of a grant given up cleanly, one whose appends
//     all succeeded and whose table never failed, and holds none of the
//     keys of which the grant saw a later owner's change (the repair of a
//     key that lost to it would then be that owner's, and the copy would
//     not know the key is shadowed): it leaves out the least range that
//     holds their hashes;
//   - a copy is used only while younger than CopyMaxAge, below the
//     changelog's delete.retention.ms: a tombstone appended after through
//     is still in the changelog's tail then, so the copy's deleted keys
//     stay deleted.

// copyRange is one copy: range rng of a partition, as a restore up to
// changelog offset through gives it, read up to at.
type copyRange struct {
	pk      partitionKey
	rng     ledger.HashRange
	through int64
	at      time.Time
	// from is the grant given up, until its calls and appends are done
	// (settleCopies); through and at are then its.
	from *grant
}

// keepCopyLocked keeps g, a grant given up cleanly with a restored table,
// as a copy; it is settled once its calls and appends are done, and then
// holds the parts of g's range that g.copyable returns. The caller holds
// s.mu.
func (s *Store) keepCopyLocked(g *grant) {
	if s.disk == nil || g.spoiled || !g.progress.done.Load() || g.table == nil {
		return
	}
	s.copies = append(s.copies, &copyRange{pk: partitionKey{g.topic, g.partition}, rng: g.rng, from: g})
}

// settleCopies makes the copies of g, whose calls and appends are done,
// copies of their own, written to disk: the parts of them g.copyable
// holds.
func (s *Store) settleCopies(g *grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disk == nil {
		return
	}
	b := s.disk.db.NewBatch()
	defer b.Close()
	var kept []*copyRange
	for _, c := range s.copies {
		if c.from != g {
			kept = append(kept, c)
			continue
		}
		for _, p := range c.parts() {
			_ = b.Set(copyKey(&p), copyValue(&p), nil)
			kept = append(kept, &p)
		}
	}
	s.copies = kept
	s.commitCopies(b)
}

// parts returns c as copies of their own, through and at set: c itself
// once settled, else the parts of it the grant it came from holds as
// copies now. For a grant not settled the caller holds s.mu.
func (c *copyRange) parts() []copyRange {
	if c.from == nil {
		return []copyRange{*c}
	}
	g := c.from
	g.mu.Lock()
	through, at := g.through, g.throughAt
	g.mu.Unlock()
	var out []copyRange
	for _, r := range g.copyable() {
		if in := r.Intersect(c.rng); !in.Empty() {
			out = append(out, copyRange{pk: c.pk, rng: in, through: through, at: at})
		}
	}
	return out
}

// takeCopiesLocked takes g's range out of the member's copies and returns
// the parts of them inside it: the grant writes its range's states over
// them. Copies that reach past it keep the rest. The change is synced to
// disk before g's restore writes in its span, so that a crash never
// leaves a copy record over states a grant changed. The caller holds s.mu.
func (s *Store) takeCopiesLocked(g *grant) []copyRange {
	if s.disk == nil {
		return nil
	}
	pk := partitionKey{g.topic, g.partition}
	b := s.disk.db.NewBatch()
	defer b.Close()
	var taken []copyRange
	var kept []*copyRange
	for _, c := range s.copies {
		in := c.rng.Intersect(g.rng)
		if c.pk != pk || in.Empty() {
			kept = append(kept, c)
			continue
		}
		part := *c
		part.rng = in
		taken = append(taken, part)
		if c.from == nil {
			_ = b.Delete(copyKey(c), nil)
		}
		for _, rest := range c.rng.Minus(g.rng) {
			r := *c
			r.rng = rest
			kept = append(kept, &r)
			if r.from == nil {
				_ = b.Set(copyKey(&r), copyValue(&r), nil)
			}
		}
	}
	s.copies = kept
	s.commitCopies(b)
	return taken
}

// commitCopies writes b, the copies' records changed, synced. A failure
// leaves records on disk that the next start may trust, so the member
// drops every copy it has (their ranges restore from the changelog), logs
// the error, and writes no state on disk until mendCopies has removed
// every record.
func (s *Store) commitCopies(b *pebble.Batch) {
	if b.Empty() {
		return
	}
	if err := b.Commit(pebble.Sync); err != nil {
		s.log.Error("write the record of a range's copy on disk; the member's copies are dropped, their ranges restore from the changelog", "error", err)
		s.copies = nil
		s.copiesBroken = true
	}
}

// mendCopies removes every copy's record from disk, synced, after a
// failed write of one; until it succeeds a restore fails (before it
// writes), so that no state is written under a record a next start would
// trust.
func (s *Store) mendCopies() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.copiesBroken {
		return nil
	}
	if err := s.disk.db.DeleteRange([]byte("c"), []byte("d"), pebble.Sync); err != nil {
		return fmt.Errorf("statestore: remove the copies' records on disk after a failed write of one: %w", err)
	}
	s.copiesBroken = false
	s.log.Info("removed every copy's record on disk after a failed write; ranges restore from the changelog")
	return nil
}

// cover returns the offset to read the changelog from for range r, when
// the copies parts (takeCopiesLocked), valid now, hold all of r: the least
// of their throughs. It is called once the grants they came from are done.
func (s *Store) cover(r ledger.HashRange, parts []copyRange) (int64, bool) {
	now := time.Now()
	var valid []copyRange
	s.mu.Lock()
	for _, part := range parts {
		for _, c := range part.parts() {
			if sinceSaved(c.at, now) < s.cfg.CopyMaxAge {
				valid = append(valid, c)
			}
		}
	}
	s.mu.Unlock()
	slices.SortFunc(valid, func(a, b copyRange) int { return cmp.Compare(a.rng.Lo, b.rng.Lo) })
	at, through := r.Lo, int64(-1)
	for _, c := range valid {
		if c.rng.Lo != at {
			return 0, false
		}
		at = c.rng.Hi
		if through < 0 || c.through < through {
			through = c.through
		}
	}
	return through, at == r.Hi && through >= 0
}

// saveHeldCopies writes a copy record for each grant the member holds
// whose table is clean, for the member's next start: Close calls it once
// no call or append is left.
func (s *Store) saveHeldCopies() {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.disk.db.NewBatch()
	defer b.Close()
	for _, gs := range s.held {
		for _, g := range gs {
			if !g.progress.done.Load() || g.table == nil {
				continue
			}
			c := copyRange{pk: partitionKey{g.topic, g.partition}, rng: g.rng, from: g}
			for _, p := range c.parts() {
				_ = b.Set(copyKey(&p), copyValue(&p), nil)
			}
		}
	}
	s.commitCopies(b)
}

// loadCopies reads the copies a former run of the member left, drops
// those CopyMaxAge or older, and clears every state on disk no copy
// holds: a range held when the member stopped without Close may hold
// changes the changelog lacks.
func (s *Store) loadCopies() error {
	now := time.Now()
	it, err := s.disk.db.NewIter(&pebble.IterOptions{LowerBound: []byte("c"), UpperBound: []byte("d")})
	if err != nil {
		return fmt.Errorf("statestore: read the copies on disk: %w", err)
	}
	b := s.disk.db.NewBatch()
	defer b.Close()
	for it.First(); it.Valid(); it.Next() {
		c, ok := decodeCopy(it.Key(), it.Value())
		if ok && sinceSaved(c.at, now) < s.cfg.CopyMaxAge {
			s.copies = append(s.copies, c)
		} else {
			_ = b.Delete(bytes.Clone(it.Key()), nil)
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("statestore: read the copies on disk: %w", err)
	}
	spans := make([][2][]byte, 0, len(s.copies))
	for _, c := range s.copies {
		start, end := span(c.pk, c.rng)
		spans = append(spans, [2][]byte{start, end})
	}
	slices.SortFunc(spans, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
	from := []byte("s")
	for _, sp := range spans {
		_ = b.DeleteRange(from, sp[0], nil)
		from = sp[1]
	}
	_ = b.DeleteRange(from, []byte("t"), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("statestore: clear the states on disk no copy holds: %w", err)
	}
	return nil
}

// copyKey is c's record key; its value is through and at (Unix
// nanoseconds), 8 bytes each.
func copyKey(c *copyRange) []byte {
	b := partitionPrefix('c', c.pk)
	b = binary.BigEndian.AppendUint64(b, c.rng.Lo)
	return binary.BigEndian.AppendUint64(b, c.rng.Hi)
}

func copyValue(c *copyRange) []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(c.through))
	return binary.BigEndian.AppendUint64(v, uint64(c.at.UnixNano()))
}

// decodeCopy reads a copy's record; a damaged one is not a copy.
func decodeCopy(k, v []byte) (*copyRange, bool) {
	if len(k) < 1+2+4+16 || len(v) != 16 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(k[1:3]))
	if len(k) != 1+2+n+4+16 {
		return nil, false
	}
	c := &copyRange{
		pk:      partitionKey{topic: string(k[3 : 3+n]), partition: int32(binary.BigEndian.Uint32(k[3+n:]))},
		rng:     ledger.HashRange{Lo: binary.BigEndian.Uint64(k[7+n:]), Hi: binary.BigEndian.Uint64(k[15+n:])},
		through: int64(binary.BigEndian.Uint64(v)),
		at:      time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))),
	}
	if c.rng.Valid() != nil || c.through < 0 {
		return nil, false
	}
	return c, true
}
