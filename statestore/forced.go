package statestore

import (
	"context"
	"maps"

	"github.com/payrouter/payrouter"
)

// The local store mirrors the shared store's forced states, as last read or written through this
// Store, so that a breaker forced open stays forced open when the shared store goes down: an
// outage must not undo what ops imposed. A forced state set while down is pending, like a
// charge, and pushed by the re-sync.

// SetForced records a forced state (payrouter.BreakerStateStore): on the shared store while it
// is up, locally (and pushed later) while it is down or while an earlier local change to the
// same breaker is still pending.
func (s *Store) SetForced(ctx context.Context, breaker string, f payrouter.Forced) error {
	if s.up.Load() && !s.forcedPending(breaker) {
		err := s.primary.SetForced(ctx, breaker, f)
		if !s.fallBack(ctx, err) {
			if err == nil {
				s.mirrorOne(breaker, f)
			}
			return err
		}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.local.SetForced(ctx, breaker, f); err != nil {
		return err
	}
	s.seq++
	s.forced[breaker] = pendingForced{f: f, version: s.seq}
	s.forcedGen++
	if s.up.Load() {
		signal(s.pushSoon)
	}
	return nil
}

// ForcedStates returns every breaker with a forced state (payrouter.BreakerStateStore): the
// shared store's with the pending local changes applied while it is up, the local mirror while
// it is down.
func (s *Store) ForcedStates(ctx context.Context) (map[string]payrouter.Forced, error) {
	if s.up.Load() {
		s.mu.Lock()
		gen := s.forcedGen
		s.mu.Unlock()
		got, err := s.primary.ForcedStates(ctx)
		if err == nil {
			return s.mirrorAll(got, gen), nil
		}
		if !s.fallBack(ctx, err) {
			return nil, err
		}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	return s.local.ForcedStates(ctx)
}

// mirrorAll applies the pending local changes to states, the shared store's forced states as
// read when forcedGen was gen, and makes the local mirror equal to the result, unless a forced
// state was written since that read: the mirror then already holds something newer.
func (s *Store) mirrorAll(states map[string]payrouter.Forced, gen uint64) map[string]payrouter.Forced {
	got := maps.Clone(states)
	if got == nil {
		got = map[string]payrouter.Forced{}
	}
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for b, p := range s.forced {
		if p.f == payrouter.ForcedNone {
			delete(got, b)
		} else {
			got[b] = p.f
		}
	}
	if gen != s.forcedGen {
		return got
	}
	// Background: the mirror is the Store's own bookkeeping, which a caller's cancellation must
	// not leave half done. Errors come only from a closed local store.
	ctx := context.Background()
	have, err := s.local.ForcedStates(ctx)
	if err != nil {
		return got
	}
	for b := range have {
		if _, ok := got[b]; !ok {
			_ = s.local.SetForced(ctx, b, payrouter.ForcedNone)
		}
	}
	for b, f := range got {
		if have[b] != f {
			_ = s.local.SetForced(ctx, b, f)
		}
	}
	s.forcedGen++
	return got
}

// mirrorOne writes a forced state the shared store took into the local mirror.
func (s *Store) mirrorOne(breaker string, f payrouter.Forced) {
	s.localMu.RLock()
	defer s.localMu.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.forced[breaker]; ok {
		return // a newer local change is pending
	}
	_ = s.local.SetForced(context.Background(), breaker, f) // the shared store took the name
	s.forcedGen++
}

func (s *Store) forcedPending(breaker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.forced[breaker]
	return ok
}
