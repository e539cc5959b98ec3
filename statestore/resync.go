package statestore

import (
	"context"
	"maps"
)

// The re-sync pushes to the coordination store the forced states set here while it was down
// (forced.go), and forgets each once pushed. It is the only re-sync this package does: the
// breakers' own state (which instance opened what, counts, trials) is resilience.Fleet's to
// re-sync, which it does from OnChange(true), called after this push. Only Run's goroutine
// pushes, so one change is never pushed twice at once, and the version check below keeps
// pending a change made here during a push.
//
// A push stops at the first error saying the store is unavailable: the Store stays down, and
// everything not pushed is pushed at the next re-sync. Any other refusal is logged
// (state_store.push_failed) and leaves that change pending, pushed again every CheckUp.

// push pushes every pending forced state once and returns how many the store took. Its error is
// one that stops the push: the store is unavailable, or ctx ended.
func (s *Store) push(ctx context.Context) (pushed int, err error) {
	s.mu.Lock()
	pending := maps.Clone(s.pending)
	s.mu.Unlock()

	for breaker, p := range pending {
		err := s.primary.SetForced(ctx, breaker, p.f)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return pushed, ctx.Err()
		case s.o.Unavailable(err):
			return pushed, err
		default:
			s.o.Log.Warn("state_store.push_failed", "kind", "forced state", "breaker", breaker, "err", err)
			continue
		}
		pushed++
		s.mu.Lock()
		if s.pending[breaker].version == p.version {
			delete(s.pending, breaker) // else changed again meanwhile: the newer one is pushed next
		}
		s.mu.Unlock()
	}
	return pushed, nil
}

// pendingCount is how many forced states wait to be pushed.
func (s *Store) pendingCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}
