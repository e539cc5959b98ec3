package statestore

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/payrouter/payrouter"
)

// A charge saved locally is pending until the re-sync has saved it to the shared store. While
// it is pending the local copy is the newest one, so it is the one read, and later saves of it
// go to the local copy too (the re-sync is then the only writer of it to the shared store, so an
// older copy can never be pushed over a newer one).

// SaveCharge saves c to the shared store while it is up, and locally while it is down, or when
// the shared store fails this very save, or when a copy of c saved locally is still pending.
func (s *Store) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	if s.up.Load() && (c == nil || !s.chargePending(c.ID)) {
		err := s.primary.SaveCharge(ctx, c)
		if !s.fallBack(ctx, err) {
			return err
		}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	if err := s.local.SaveCharge(ctx, c); err != nil {
		return err
	}
	s.mu.Lock()
	s.seq++
	s.charges[c.ID] = s.seq
	s.mu.Unlock()
	if s.up.Load() {
		signal(s.pushSoon)
	}
	return nil
}

// Charge returns the charge with that id: the local copy while it is pending or while the shared
// store is down, else the shared store's, or the local copy when the shared store has none.
func (s *Store) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	if s.up.Load() && !s.chargePending(id) {
		c, err := s.primary.Charge(ctx, id)
		switch {
		case err == nil:
			return c, nil
		case errors.Is(err, payrouter.ErrNotFound):
			if lc, lerr := s.localCharge(ctx, id); lerr == nil {
				return lc, nil
			}
			return nil, err
		case !s.fallBack(ctx, err):
			return nil, err
		}
	}
	return s.localCharge(ctx, id)
}

func (s *Store) localCharge(ctx context.Context, id string) (*payrouter.Charge, error) {
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	return s.local.Charge(ctx, id)
}

// ChargesByStatus returns up to limit charges in that status, oldest first, ties by ID. While up
// it merges the pending local charges into the shared store's answer, the local copy replacing
// the shared store's, so that the reconciler sees a charge processed during the outage before
// the re-sync has pushed it.
func (s *Store) ChargesByStatus(ctx context.Context, status payrouter.ChargeStatus, limit int) ([]*payrouter.Charge, error) {
	if s.up.Load() {
		pending := s.pendingChargeIDs()
		// Pending charges the shared store also lists are dropped from its answer, so ask it for
		// that many more.
		more := limit
		if limit > 0 && limit <= math.MaxInt-len(pending) {
			more = limit + len(pending)
		}
		got, err := s.primary.ChargesByStatus(ctx, status, more)
		if err == nil {
			if len(pending) == 0 {
				return got, nil
			}
			return s.mergePending(ctx, got, pending, status, limit)
		}
		if !s.fallBack(ctx, err) {
			return nil, err
		}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	return s.local.ChargesByStatus(ctx, status, limit)
}

// mergePending replaces the shared store's copy of each pending charge in got with the local
// one, adds pending charges in status that it did not list, and keeps the order and the limit.
func (s *Store) mergePending(ctx context.Context, got []*payrouter.Charge, pending map[string]bool, status payrouter.ChargeStatus, limit int) ([]*payrouter.Charge, error) {
	merged := slices.DeleteFunc(got, func(c *payrouter.Charge) bool { return pending[c.ID] })
	for id := range pending {
		c, err := s.localCharge(ctx, id)
		if errors.Is(err, payrouter.ErrNotFound) {
			continue // pushed and compacted away since the snapshot: the shared store listed it
		}
		if err != nil {
			return nil, err
		}
		if c.Status == status {
			merged = append(merged, c)
		}
	}
	slices.SortFunc(merged, func(a, b *payrouter.Charge) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return merged[:min(max(limit, 0), len(merged))], nil
}

func (s *Store) chargePending(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.charges[id]
	return ok
}

func (s *Store) pendingChargeIDs() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.charges) == 0 {
		return nil
	}
	ids := make(map[string]bool, len(s.charges))
	for id := range s.charges {
		ids[id] = true
	}
	return ids
}

// CompleteCharge saves c and completes key with rec in one call to the shared store while it is
// up and neither is held locally; otherwise, or when the shared store fails this very call, it is
// SaveCharge then Complete, which serve locally what must be.
func (s *Store) CompleteCharge(ctx context.Context, c *payrouter.Charge, key string, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	if s.up.Load() && c != nil && !s.chargePending(c.ID) && !s.heldLocally(key, time.Now()) {
		err := s.primary.CompleteCharge(ctx, c, key, rec, ttl)
		if !s.fallBack(ctx, err) {
			if err == nil {
				s.forgetClaim(key)
				s.recent.add(key, rec, ttl, time.Now())
			}
			return err
		}
	}
	if err := s.SaveCharge(ctx, c); err != nil {
		return err
	}
	return s.Complete(ctx, key, rec, ttl)
}
