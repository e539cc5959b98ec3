package memstore

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"time"

	"github.com/payrouter/payrouter"
)

// sweepBatch bounds how many expired keys one idempotency operation forgets. Each operation
// adds at most one key and may forget this many, so a backlog of expired keys drains quickly
// while no single request pays for forgetting all of them at once.
const sweepBatch = 64

// idemEntry is one idempotency key: in flight while rec is nil, completed otherwise. Either way
// it is forgotten at expires.
type idemEntry struct {
	fingerprint string
	rec         *payrouter.IdempotencyRecord
	expires     time.Time
}

func (e idemEntry) expired(now time.Time) bool { return !now.Before(e.expires) }

// Claim takes key for a request with that fingerprint. It returns (nil, nil) when the key is new
// (or its earlier claim or record expired) and now held by the caller for inFlightTTL; a copy
// of the stored record when the key completed with the same fingerprint; payrouter.ErrMismatch
// when it completed with another one; payrouter.ErrInFlight while it is held.
//
// A key in flight answers ErrInFlight whatever the fingerprint: the first request may still be
// released without an answer, after which the other body is a legitimate first request, so
// calling it a mismatch would be premature. The client retrying after the conflict learns the
// truth.
func (s *Store) Claim(ctx context.Context, key, fingerprint string, inFlightTTL time.Duration) (*payrouter.IdempotencyRecord, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	if key == "" {
		return nil, errors.New("memstore: claim: empty key")
	}
	if inFlightTTL <= 0 {
		return nil, errors.New("memstore: claim: in-flight ttl must be positive")
	}
	now := s.now()

	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	s.sweep(now)
	if e, ok := s.idem[key]; ok && !e.expired(now) {
		switch {
		case e.rec == nil:
			return nil, payrouter.ErrInFlight
		case e.fingerprint != fingerprint:
			return nil, payrouter.ErrMismatch
		default:
			return cloneRecord(e.rec), nil
		}
	}
	s.put(key, idemEntry{fingerprint: fingerprint, expires: now.Add(inFlightTTL)})
	return nil, nil
}

// Complete stores rec as the answer for key, kept for ttl; a zero rec.CreatedAt is set to now.
// The record is stored even when the claim has expired, because once a gateway was asked the
// answer is what keeps a retry from charging again. A record already completed and not expired
// is kept: the first complete answer is the one replayed (CONTRACT.md, Idempotency).
func (s *Store) Complete(ctx context.Context, key string, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if key == "" {
		return errors.New("memstore: complete: empty key")
	}
	if ttl <= 0 {
		return errors.New("memstore: complete: ttl must be positive")
	}
	now := s.now()
	stored := cloneRecord(&rec)
	if stored.CreatedAt.IsZero() {
		stored.CreatedAt = now
	}

	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	s.sweep(now)
	if e, ok := s.idem[key]; ok && e.rec != nil && !e.expired(now) {
		return nil
	}
	s.put(key, idemEntry{fingerprint: rec.Fingerprint, rec: stored, expires: now.Add(ttl)})
	return nil
}

// Release forgets a claimed key so that the same key may be sent again. A completed record is
// kept: a Release deferred by a handler that completed must not erase the stored answer.
func (s *Store) Release(ctx context.Context, key string) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	now := s.now()

	s.idemMu.Lock()
	defer s.idemMu.Unlock()
	s.sweep(now)
	if e, ok := s.idem[key]; ok && (e.rec == nil || e.expired(now)) {
		// Its expiry stays in the heap and is skipped when popped: finding it to remove it
		// would cost a scan.
		delete(s.idem, key)
	}
	return nil
}

func (s *Store) put(key string, e idemEntry) {
	s.idem[key] = e
	s.expiries.push(expiry{at: e.expires, key: key})
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
			delete(s.idem, next.key)
		}
	}
	s.expiries.shrink()
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
