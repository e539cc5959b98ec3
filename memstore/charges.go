package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/payrouter/payrouter"
)

// SaveCharge writes c as the next version of its charge (payrouter.ChargeStore): created when
// c.Stored.Version is 0 and the id is new, else only while the stored charge is at
// c.Stored.Version, with the change's events, all under the store's locks. It keeps a deep copy,
// so the caller may go on changing c, and leaves out the payment method, as every store does
// (payrouter.Charge): a token kept here would sit in memory long after the gateways needed it.
func (s *Store) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := checkCharge("save charge", c); err != nil {
		return err
	}
	if c.Hold.Held() {
		// Fenced: the check and the write under idemMu, so that no claim slips between them.
		s.idemMu.Lock()
		defer s.idemMu.Unlock()
		if !s.holds(c.Hold, s.now()) {
			return fmt.Errorf("memstore: save charge %s: %w", c.ID, payrouter.ErrHoldLost)
		}
	}
	s.chargeMu.Lock()
	defer s.chargeMu.Unlock()
	if err := s.current(c); err != nil {
		return err
	}
	return s.putCharge(c)
}

func checkCharge(what string, c *payrouter.Charge) error {
	if c == nil {
		return fmt.Errorf("memstore: %s: nil charge", what)
	}
	if c.ID == "" {
		return fmt.Errorf("memstore: %s: empty id", what)
	}
	return nil
}

// current checks that c's charge is stored at the version c was read at (none: not stored), and
// that c's refunds fit it (payrouter.Charge.Fits): the money rule held where the write happens,
// whatever computed c. chargeMu must be held.
func (s *Store) current(c *payrouter.Charge) error {
	var at int64
	old, ok := s.charges[c.ID]
	if ok {
		at = old.Stored.Version
	}
	if at != c.Stored.Version {
		return fmt.Errorf("memstore: charge %s is at version %d, not %d: %w", c.ID, at, c.Stored.Version, payrouter.ErrStale)
	}
	if !c.Fits(old) {
		return fmt.Errorf("memstore: charge %s of %d with %d refunded and %d reserved: refunds would exceed it: %w", c.ID, c.Amount, c.Refunded, c.RefundsReserved, payrouter.ErrStale)
	}
	return nil
}

// putCharge stores a copy of c as its next version, without its payment method, with the events
// of its change, and sets c.Stored; the caller has checked c and its version and holds
// chargeMu. It counts what the charge takes to its owner (size.go) and keeps the bounds: first
// what time and finished work let go (tidy), then, for a new charge its owner's quota cannot
// take, its owner's settled charges holding no money; when none is left the new charge is
// refused with ErrFull and nothing is written. A write to a charge held is never refused.
func (s *Store) putCharge(c *payrouter.Charge) error {
	now := s.now()
	old, exists := s.charges[c.ID]
	e := s.entries[c.ID]
	fresh := e == nil
	if fresh {
		e = &chargeEntry{id: c.ID, owner: c.Owner}
	}
	stored := e.version(c, exists)
	ver := versionBytes(stored, e)
	need := ver
	switch {
	case !exists && fresh:
		need += chargeFixedBytes + bodyBytes(stored)
	case !exists:
		need += bodyBytes(stored)
	case !e.curKept:
		need -= e.cur // the version replaced is freed: no event holds it
	}
	var events []*storedEvent
	for _, t := range payrouter.ChargeEvents(c.Stored, c) {
		ev := s.newEvent(t, stored, nil)
		events = append(events, ev)
		need += eventBytes(&ev.ev)
	}

	s.queueMu.Lock()
	s.unorder(e) // out of the orders while written: neither retention nor room drops it
	s.tidy(now, e)
	ok := s.room(e.owner, need, false, now)
	if !ok && exists {
		s.add(e.owner, need, false)
		ok = true
	}
	s.queueMu.Unlock()
	if !ok {
		return errFull(fmt.Sprintf("save charge %s: its owner %q holds %d bytes, and a new charge of %d would pass the %d of its share of %d bytes (state.max_memory) new charges may take, with nothing of its own that may go",
			c.ID, e.owner, s.OwnerBytes(e.owner), need, limit(s.quota.Load(), false), s.quota.Load()))
	}

	if exists && old.Status != c.Status {
		s.unindex(old)
	}
	if fresh {
		s.entries[c.ID] = e
	}
	s.charges[c.ID] = stored
	ids := s.byStatus[c.Status]
	if ids == nil {
		ids = make(map[string]struct{})
		s.byStatus[c.Status] = ids
	}
	ids[c.ID] = struct{}{}
	e.bytes += need
	e.cur, e.curKept, e.written = ver, len(events) > 0, now
	for _, ev := range events {
		s.insertEvent(ev, c.ID)
	}
	if settled(c.Status) {
		s.push(e, stored, now)
	}
	c.Stored = stored.Stored
	return nil
}

// version is the copy of c stored as its next version: no payment method, no hold, its Stored
// set, its own attempts, and the body of the charge's first version when c's is the same, so
// that every version holds one body (the first version's body is set on e when c is new).
func (e *chargeEntry) version(c *payrouter.Charge, exists bool) *payrouter.Charge {
	v := *c
	v.PaymentMethod = payrouter.PaymentMethod{}
	v.Hold = payrouter.Hold{}
	v.Stored = payrouter.Stored{Version: c.Stored.Version + 1, Status: c.Status, Refunded: c.Refunded}
	v.Attempts = slices.Clone(c.Attempts)
	if !exists {
		e.md, e.desc, e.cust = maps.Clone(c.Metadata), c.Description, c.CustomerID
	}
	if maps.Equal(c.Metadata, e.md) {
		v.Metadata = e.md // never changed in place: every read clones it
	} else {
		v.Metadata = maps.Clone(c.Metadata)
	}
	if c.Description == e.desc {
		v.Description = e.desc
	}
	if c.CustomerID == e.cust {
		v.CustomerID = e.cust
	}
	return &v
}

func (s *Store) unindex(c *payrouter.Charge) {
	ids := s.byStatus[c.Status]
	delete(ids, c.ID)
	if len(ids) == 0 {
		// An emptied status set is dropped, or one map per status ever seen would stay forever.
		delete(s.byStatus, c.Status)
	}
}

// Charge returns a copy of the charge with that id, or an error wrapping payrouter.ErrNotFound.
func (s *Store) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.chargeMu.RLock()
	c, ok := s.charges[id]
	s.chargeMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("memstore: charge %q: %w", id, payrouter.ErrNotFound)
	}
	// The stored charge is never modified in place (SaveCharge swaps in a new copy), so copying it
	// outside the lock is safe.
	return cloneCharge(c), nil
}

// ChargesByStatus returns copies of up to limit charges in that status, oldest first by
// CreatedAt, ties broken by ID so that the order is stable. A limit of zero or less returns none.
func (s *Store) ChargesByStatus(ctx context.Context, status payrouter.ChargeStatus, limit int) ([]*payrouter.Charge, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, nil
	}
	s.chargeMu.RLock()
	ids := s.byStatus[status]
	found := make([]*payrouter.Charge, 0, len(ids))
	for id := range ids {
		found = append(found, s.charges[id])
	}
	s.chargeMu.RUnlock()

	slices.SortFunc(found, func(a, b *payrouter.Charge) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	found = found[:min(limit, len(found))]
	for i, c := range found {
		found[i] = cloneCharge(c)
	}
	return found, nil
}

// cloneCharge copies c deeply. Charge's only reference-typed fields are Metadata and Attempts
// (Attempt holds values only); a test fails when a new one appears, so this cannot silently
// start sharing memory with callers.
func cloneCharge(c *payrouter.Charge) *payrouter.Charge {
	cp := *c
	cp.Metadata = maps.Clone(c.Metadata)
	cp.Attempts = slices.Clone(c.Attempts)
	return &cp
}

// CompleteCharge saves c and completes h's key with rec in one step, both fenced by h
// (payrouter.Store): both are stored, or neither.
func (s *Store) CompleteCharge(ctx context.Context, c *payrouter.Charge, h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if err := checkCharge("complete charge", c); err != nil {
		return err
	}
	if err := checkComplete(h, ttl); err != nil {
		return err
	}
	now := s.now()
	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	s.sweep(now)
	if !s.holds(h, now) {
		return fmt.Errorf("memstore: complete charge %s: %w", c.ID, payrouter.ErrHoldLost)
	}
	s.chargeMu.Lock()
	defer s.chargeMu.Unlock()
	if err := s.current(c); err != nil {
		return err
	}
	if err := s.putCharge(c); err != nil {
		return err
	}
	if s.complete(h, rec, ttl, now) && rec.ChargeID != "" {
		s.keep(rec.ChargeID, now.Add(ttl))
	}
	return nil
}

// ClaimCharge claims key as Claim does and, when the claim is won, stores c as its charge's
// first version, under the same locks (payrouter.Store): a completed key's record is returned
// and nothing written; a charge stored before under c.ID is returned as Claimed.Prev and c not
// stored. A charge its owner's share cannot take is refused as SaveCharge refuses it, and the
// key is not kept held for it.
func (s *Store) ClaimCharge(ctx context.Context, owner, key, fingerprint string, holdFor time.Duration, c *payrouter.Charge) (payrouter.Claimed, error) {
	if err := s.usable(ctx); err != nil {
		return payrouter.Claimed{}, err
	}
	if err := checkCharge("claim charge", c); err != nil {
		return payrouter.Claimed{}, err
	}
	if c.Stored.Version != 0 {
		return payrouter.Claimed{}, fmt.Errorf("memstore: claim charge %s: not a new charge (version %d)", c.ID, c.Stored.Version)
	}
	if key == "" {
		return payrouter.Claimed{}, errors.New("memstore: claim: empty key")
	}
	if holdFor <= 0 {
		return payrouter.Claimed{}, errors.New("memstore: claim: hold must be positive")
	}
	now := s.now()
	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	rec, h, err := s.claim(owner, key, fingerprint, holdFor, now)
	if err != nil || rec != nil {
		return payrouter.Claimed{Record: rec}, err
	}
	s.chargeMu.Lock()
	defer s.chargeMu.Unlock()
	c.Hold = h
	if prev, ok := s.charges[c.ID]; ok {
		return payrouter.Claimed{Hold: h, Prev: cloneCharge(prev)}, nil
	}
	if err := s.putCharge(c); err != nil {
		s.forget(key)
		c.Hold = payrouter.Hold{}
		return payrouter.Claimed{}, err
	}
	return payrouter.Claimed{Hold: h, Stored: true}, nil
}
