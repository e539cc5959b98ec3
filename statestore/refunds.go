package statestore

import (
	"context"
	"errors"

	"github.com/payrouter/payrouter"
)

// Refunds are kept like charges (charges.go): a refund saved locally is pending until the
// re-sync has saved it to the shared store, and while it is pending the local copy is the one
// read and written.

// SaveRefund saves r to the shared store while it is up, and locally while it is down, or when
// the shared store fails this very save, or when a copy of r saved locally is still pending.
func (s *Store) SaveRefund(ctx context.Context, r *payrouter.Refund) error {
	if s.up.Load() && (r == nil || !s.refundPending(r.ID)) {
		err := s.primary.SaveRefund(ctx, r)
		if !s.fallBack(ctx, err) {
			return err
		}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	if err := s.local.SaveRefund(ctx, r); err != nil {
		return err
	}
	s.mu.Lock()
	s.seq++
	s.refunds[r.ID] = s.seq
	s.mu.Unlock()
	if s.up.Load() {
		signal(s.pushSoon)
	}
	return nil
}

// Refund returns the refund with that id: the local copy while it is pending or while the shared
// store is down, else the shared store's, or the local copy when the shared store has none.
func (s *Store) Refund(ctx context.Context, id string) (*payrouter.Refund, error) {
	if s.up.Load() && !s.refundPending(id) {
		r, err := s.primary.Refund(ctx, id)
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, payrouter.ErrNotFound):
			if lr, lerr := s.localRefund(ctx, id); lerr == nil {
				return lr, nil
			}
			return nil, err
		case !s.fallBack(ctx, err):
			return nil, err
		}
	}
	return s.localRefund(ctx, id)
}

func (s *Store) localRefund(ctx context.Context, id string) (*payrouter.Refund, error) {
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	return s.local.Refund(ctx, id)
}

func (s *Store) refundPending(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.refunds[id]
	return ok
}
