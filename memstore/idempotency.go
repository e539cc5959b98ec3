package memstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/payrouter/payrouter"
)

// sweepBatch bounds how many expired keys one idempotency operation forgets. Each operation
// adds at most one key and may forget this many, so a backlog of expired keys drains quickly
// while no single request pays for forgetting all of them at once.
const sweepBatch = 64

// idemEntry is one idempotency key of owner: in flight while rec is nil (held until heldUntil
// by the claim whose fencing token is token), completed otherwise. Either way it is forgotten
// at expires. bytes is what it is counted at to its owner (idemBytes).
type idemEntry struct {
	owner       string
	fingerprint string
	rec         *payrouter.IdempotencyRecord
	token       int64
	heldUntil   time.Time
	expires     time.Time
	bytes       int64
}

func (e idemEntry) expired(now time.Time) bool { return !now.Before(e.expires) }

// Claim takes key for a request of owner with that fingerprint (payrouter.IdempotencyStore).
// It returns a new Hold when the key is new, or its earlier hold or record ran out; a copy of
// the stored record when the key completed with the same fingerprint; payrouter.ErrMismatch
// when it completed with another one; payrouter.ErrInFlight while it is held.
//
// A key in flight answers ErrInFlight whatever the fingerprint: the first request may still be
// released without an answer, after which the other body is a legitimate first request, so
// calling it a mismatch would be premature. The client retrying after the conflict learns the
// truth.
//
// A new key is counted to owner (WithBounds): when owner's quota cannot take it, once its
// expired keys and its settled charges holding no money went, it is refused with ErrFull.
func (s *Store) Claim(ctx context.Context, owner, key, fingerprint string, holdFor time.Duration) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
	if err := s.usable(ctx); err != nil {
		return nil, payrouter.Hold{}, err
	}
	if key == "" {
		return nil, payrouter.Hold{}, errors.New("memstore: claim: empty key")
	}
	if holdFor <= 0 {
		return nil, payrouter.Hold{}, errors.New("memstore: claim: hold must be positive")
	}
	now := s.now()

	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	return s.claim(owner, key, fingerprint, holdFor, now)
}

// claim is Claim under idemMu, which the caller holds.
func (s *Store) claim(owner, key, fingerprint string, holdFor time.Duration, now time.Time) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
	s.sweep(now)
	old, known := s.idem[key]
	if known && !old.expired(now) {
		switch {
		case old.rec == nil && now.Before(old.heldUntil):
			return nil, payrouter.Hold{}, payrouter.ErrInFlight
		case old.rec == nil:
			// The holder stopped renewing (it died or stalled): the key is this request's now,
			// under a larger token that fences the old holder off. Not a new key: it is
			// counted anew, never refused.
			h := payrouter.Hold{Key: key, Token: s.tokens.Add(1)}
			s.put(key, s.held(old.owner, fingerprint, h, now, holdFor))
			return nil, h, nil
		case old.fingerprint != fingerprint:
			return nil, payrouter.Hold{}, payrouter.ErrMismatch
		default:
			return cloneRecord(old.rec), payrouter.Hold{}, nil
		}
	}
	if known {
		s.forget(key) // expired: no promise is kept for it any more
	}
	h := payrouter.Hold{Key: key, Token: s.tokens.Add(1)}
	e := s.held(owner, fingerprint, h, now, holdFor)
	if !s.admit(owner, e.bytes, now) {
		return nil, payrouter.Hold{}, errFull(fmt.Sprintf("claim: owner %q holds %d bytes, and a new idempotency key of %d would pass its quota of %d bytes (state.max_memory) with nothing of its own that may go",
			owner, s.OwnerBytes(owner), e.bytes, s.quota.Load()))
	}
	s.idem[key] = e
	s.expiries.push(expiry{at: e.expires, key: key})
	return nil, h, nil
}

// held is the entry of key h.Key claimed by h for owner at now, held for holdFor, with its
// bytes.
func (s *Store) held(owner, fingerprint string, h payrouter.Hold, now time.Time, holdFor time.Duration) idemEntry {
	heldUntil := now.Add(holdFor)
	// Kept as long again after the hold runs out: a slow holder that finishes meanwhile still
	// finds its token and stores its answer while nobody took the key.
	e := idemEntry{owner: owner, fingerprint: fingerprint, token: h.Token, heldUntil: heldUntil, expires: heldUntil.Add(holdFor)}
	e.bytes = idemBytes(h.Key, &e)
	return e
}

// admit counts n more bytes of owner's keys if its quota takes them, forgetting every expired
// key and then dropping owner's settled charges holding no money, oldest first, as long as it
// does not; false, with nothing counted, when nothing more may go. idemMu must be held.
func (s *Store) admit(owner string, n int64, now time.Time) bool {
	if s.tryAdd(owner, n, true) {
		return true
	}
	// Every key held is within its TTL, or the sweep is behind: forget every expired one
	// before dropping anything. An unexpired key is a promise kept for its TTL, never dropped
	// early.
	s.sweepAll(now)
	if s.tryAdd(owner, n, true) {
		return true
	}
	s.chargeMu.Lock()
	defer s.chargeMu.Unlock()
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	s.tidy(now, nil)
	return s.room(owner, n, true, now)
}

// Peek tells what Claim would, without claiming (payrouter.IdempotencyStore).
func (s *Store) Peek(ctx context.Context, key, fingerprint string) (*payrouter.IdempotencyRecord, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, errors.New("memstore: peek: empty key")
	}
	now := s.now()
	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	e, ok := s.idem[key]
	switch {
	case !ok || e.expired(now):
		return nil, nil
	case e.rec == nil && now.Before(e.heldUntil):
		return nil, payrouter.ErrInFlight
	case e.rec == nil:
		return nil, nil
	case e.fingerprint != fingerprint:
		return nil, payrouter.ErrMismatch
	}
	return cloneRecord(e.rec), nil
}

// Renew extends h by holdFor (payrouter.IdempotencyStore); payrouter.ErrHoldLost when h is no
// longer the key's claim or the key completed.
func (s *Store) Renew(ctx context.Context, h payrouter.Hold, holdFor time.Duration) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if holdFor <= 0 {
		return errors.New("memstore: renew: hold must be positive")
	}
	now := s.now()
	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	e, ok := s.idem[h.Key]
	if !ok || e.expired(now) || e.token != h.Token || e.rec != nil {
		return fmt.Errorf("memstore: renew %q: %w", h.Key, payrouter.ErrHoldLost)
	}
	e.heldUntil = now.Add(holdFor)
	e.expires = e.heldUntil.Add(holdFor)
	s.put(h.Key, e)
	return nil
}

// holds reports whether h is still the latest claim of its key; idemMu must be held.
func (s *Store) holds(h payrouter.Hold, now time.Time) bool {
	e, ok := s.idem[h.Key]
	return ok && !e.expired(now) && e.token == h.Token
}

// Complete stores rec as the answer for h's key, kept for ttl; a zero rec.CreatedAt is set to
// now. The record is stored even when the hold ran out while nobody took the key, because once a
// gateway was asked the answer is what keeps a retry from charging again; payrouter.ErrHoldLost
// when a later claim took it. A record already completed is kept: the first complete answer is
// the one replayed (docs/api.md, Idempotency). A record answered from its charge
// (rec.ChargeID) keeps that charge stored until the record expires.
func (s *Store) Complete(ctx context.Context, h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	if err := s.usable(ctx); err != nil {
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
		return fmt.Errorf("memstore: complete %q: %w", h.Key, payrouter.ErrHoldLost)
	}
	if s.complete(h, rec, ttl, now) && rec.ChargeID != "" {
		s.chargeMu.Lock()
		s.keep(rec.ChargeID, now.Add(ttl))
		s.chargeMu.Unlock()
	}
	return nil
}

func checkComplete(h payrouter.Hold, ttl time.Duration) error {
	switch {
	case h.Key == "":
		return errors.New("memstore: complete: empty key")
	case !h.Held():
		return errors.New("memstore: complete: no hold")
	case ttl <= 0:
		return errors.New("memstore: complete: ttl must be positive")
	}
	return nil
}

// complete stores rec for h's key, which h holds, and reports whether it did (false: the key
// completed before, and its first answer stands). idemMu must be held. Never refused: the
// key was counted when claimed, and what the record adds is counted however full its owner
// is, since the answer is what keeps a retry from charging again.
func (s *Store) complete(h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration, now time.Time) bool {
	old := s.idem[h.Key]
	if old.rec != nil {
		return false
	}
	stored := cloneRecord(&rec)
	if stored.CreatedAt.IsZero() {
		stored.CreatedAt = now
	}
	s.put(h.Key, idemEntry{owner: old.owner, fingerprint: stored.Fingerprint, rec: stored, token: h.Token, expires: now.Add(ttl)})
	return true
}

// Release forgets a key held by h so that the same key may be sent again. A completed record is
// kept (a Release deferred by a handler that completed must not erase the stored answer), and
// so is a key a later claim took.
func (s *Store) Release(ctx context.Context, h payrouter.Hold) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	now := s.now()

	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	s.sweep(now)
	if e, ok := s.idem[h.Key]; ok && e.token == h.Token && (e.rec == nil || e.expired(now)) {
		// Its expiry stays in the heap and is skipped when popped: finding it to remove it
		// would cost a scan.
		s.forget(h.Key)
	}
	return nil
}

// put stores e as key's entry, counting it (idemBytes) to its owner in place of what the entry
// it replaces was counted at. idemMu must be held.
func (s *Store) put(key string, e idemEntry) {
	e.bytes = idemBytes(key, &e)
	old, known := s.idem[key]
	if known && old.owner != e.owner {
		s.add(old.owner, -old.bytes, true)
		old.bytes = 0
	}
	s.add(e.owner, e.bytes-old.bytes, true)
	s.idem[key] = e
	s.expiries.push(expiry{at: e.expires, key: key})
}

// forget deletes key's entry and gives its bytes back to its owner. idemMu must be held.
func (s *Store) forget(key string) {
	if e, ok := s.idem[key]; ok {
		delete(s.idem, key)
		s.add(e.owner, -e.bytes, true)
	}
}

// sweep forgets up to sweepBatch keys expired at now. Expiries of keys since re-claimed,
// completed or released are stale: they are dropped without touching the key, whose own entry
// decides.
func (s *Store) sweep(now time.Time) {
	for range sweepBatch {
		next, ok := s.expiries.peek()
		if !ok || now.Before(next.at) {
			break
		}
		s.expiries.pop()
		if e, ok := s.idem[next.key]; ok && e.expired(now) {
			s.forget(next.key)
		}
	}
	s.expiries.shrink()
}

// sweepAll forgets every key expired at now.
func (s *Store) sweepAll(now time.Time) {
	for {
		next, ok := s.expiries.peek()
		if !ok || now.Before(next.at) {
			return
		}
		s.sweep(now)
	}
}

// cloneRecord copies rec deeply so that neither the caller nor a later reader shares its Body or
// Header with the stored record.
func cloneRecord(rec *payrouter.IdempotencyRecord) *payrouter.IdempotencyRecord {
	cp := *rec
	cp.Header = maps.Clone(rec.Header)
	cp.Body = bytes.Clone(rec.Body)
	return &cp
}

// expiry is when one key is due to be forgotten.
type expiry struct {
	at  time.Time
	key string
}

// expiryHeap is a min-heap of expiries, soonest first. It is written out rather than built on
// container/heap, whose Push takes an any and so allocates on every claim.
type expiryHeap []expiry

func (h expiryHeap) peek() (expiry, bool) {
	if len(h) == 0 {
		return expiry{}, false
	}
	return h[0], true
}

func (h *expiryHeap) push(e expiry) {
	*h = append(*h, e)
	a := *h
	for i := len(a) - 1; i > 0; {
		parent := (i - 1) / 2
		if !a[i].at.Before(a[parent].at) {
			break
		}
		a[i], a[parent] = a[parent], a[i]
		i = parent
	}
}

func (h *expiryHeap) pop() {
	a := *h
	last := len(a) - 1
	a[0] = a[last]
	a[last] = expiry{} // let the key string be collected
	a = a[:last]
	for i := 0; ; {
		smallest, l, r := i, 2*i+1, 2*i+2
		if l < len(a) && a[l].at.Before(a[smallest].at) {
			smallest = l
		}
		if r < len(a) && a[r].at.Before(a[smallest].at) {
			smallest = r
		}
		if smallest == i {
			break
		}
		a[i], a[smallest] = a[smallest], a[i]
		i = smallest
	}
	*h = a
}

// shrink gives back the backing array after a burst of keys has drained, since a slice never
// does so by itself.
func (h *expiryHeap) shrink() {
	if cap(*h) > 1024 && len(*h) < cap(*h)/4 {
		*h = append(expiryHeap(nil), *h...)
	}
}
