package statestore

import (
	"bytes"
	"context"
	"maps"
	"time"

	"github.com/payrouter/payrouter"
)

// A key is held locally from a local Claim until its record is in the shared store (or it is
// released). While it is, every call about it is answered locally, up or down: the shared store
// has never heard of it, and claiming it there would let a retry run the charge a second time.
//
// Keys this instance claimed on the shared store are remembered too, until completed or
// released, so that while the shared store is down a retry of one still in flight answers
// ErrInFlight instead of being claimed locally and charged again.

// Claim takes key for a request with that fingerprint (payrouter.IdempotencyStore).
func (s *Store) Claim(ctx context.Context, key, fingerprint string, inFlightTTL time.Duration) (*payrouter.IdempotencyRecord, error) {
	// Taken before the store's own clock read, so a claim never outlives its expiry here.
	now := time.Now()
	if s.up.Load() && !s.heldLocally(key, now) {
		rec, err := s.primary.Claim(ctx, key, fingerprint, inFlightTTL)
		if !s.fallBack(ctx, err) {
			if err == nil && rec == nil {
				s.mu.Lock()
				s.claims[key] = claim{fingerprint: fingerprint, expires: now.Add(inFlightTTL)}
				s.mu.Unlock()
			}
			return rec, err
		}
	}
	if s.heldOnPrimary(key, now) {
		return nil, payrouter.ErrInFlight
	}
	if rec, ok := s.recent.get(key, now); ok {
		// Answered through this instance just before the outage: the shared store has it, and
		// so do we.
		if rec.Fingerprint != fingerprint {
			return nil, payrouter.ErrMismatch
		}
		return &rec, nil
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	rec, err := s.local.Claim(ctx, key, fingerprint, inFlightTTL)
	if err == nil && rec == nil {
		s.mu.Lock()
		s.claims[key] = claim{fingerprint: fingerprint, expires: now.Add(inFlightTTL), local: true}
		s.mu.Unlock()
	}
	return rec, err
}

// Complete stores the answer for key (payrouter.IdempotencyStore). A key held locally, or any
// key while the shared store is down, is completed locally and its record queued for the shared
// store.
func (s *Store) Complete(ctx context.Context, key string, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	now := time.Now()
	if rec.CreatedAt.IsZero() {
		// Set here, so that the local record and the one pushed later are the same.
		rec.CreatedAt = now
	}
	if s.up.Load() && !s.heldLocally(key, now) {
		err := s.primary.Complete(ctx, key, rec, ttl)
		if !s.fallBack(ctx, err) {
			if err == nil {
				s.forgetClaim(key)
				s.recent.add(key, rec, ttl, now)
			}
			return err
		}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	if err := s.local.Complete(ctx, key, rec, ttl); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.claims, key)
	delete(s.releases, key)
	// The first record completed locally is the one the local store keeps and replays, so it is
	// the one pushed.
	if r, ok := s.records[key]; !ok || !now.Before(r.expires) {
		s.records[key] = pendingRecord{rec: cloneRecord(rec), expires: now.Add(ttl)}
	}
	s.mu.Unlock()
	if s.up.Load() {
		signal(s.pushSoon)
	}
	return nil
}

// Release forgets a claimed key whose answer is not stored (payrouter.IdempotencyStore). A key
// claimed on the shared store and released while it is down is released there by the re-sync,
// if its claim has not expired by then, so that the client's retry need not wait for the expiry.
func (s *Store) Release(ctx context.Context, key string) error {
	now := time.Now()
	if s.up.Load() && !s.heldLocally(key, now) {
		err := s.primary.Release(ctx, key)
		if !s.fallBack(ctx, err) {
			if err == nil {
				s.forgetClaim(key)
			}
			return err
		}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	if err := s.local.Release(ctx, key); err != nil {
		return err
	}
	s.mu.Lock()
	if c, ok := s.claims[key]; ok {
		delete(s.claims, key)
		if !c.local && now.Before(c.expires) {
			s.releases[key] = c.expires
		}
	}
	s.mu.Unlock()
	return nil
}

// heldLocally reports whether key was claimed or completed locally and is not in the shared
// store yet.
func (s *Store) heldLocally(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.claims[key]; ok && c.local && now.Before(c.expires) {
		return true
	}
	r, ok := s.records[key]
	return ok && now.Before(r.expires)
}

// heldOnPrimary reports whether this instance holds key in flight on the shared store.
func (s *Store) heldOnPrimary(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.claims[key]
	return ok && !c.local && now.Before(c.expires)
}

func (s *Store) forgetClaim(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.claims, key)
}

// cloneRecord copies rec deeply, so the queued record shares nothing with the caller's.
func cloneRecord(rec payrouter.IdempotencyRecord) payrouter.IdempotencyRecord {
	rec.Header = maps.Clone(rec.Header)
	rec.Body = bytes.Clone(rec.Body)
	return rec
}
