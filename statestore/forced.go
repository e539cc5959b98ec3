package statestore

import (
	"context"
	"fmt"
	"maps"

	"github.com/payrouter/payrouter"
)

// Forced states are the one part of the coordination state this instance keeps a copy of, in
// memory: a breaker ops forced open must stay forced open when Redis goes down, since an outage
// of Redis must not undo what ops imposed. The copy (mirror) is what this instance last read
// from Redis or wrote to it.
//
// What is decided while Redis is down, honestly:
//   - SetForced while down is taken here, at once, and applies to this instance only: its
//     ForcedStates answers it; no other instance knows of it until Redis is back.
//   - It is pending, and the re-sync pushes it (SetForced on Redis, whose script also tells
//     every instance watching) before the Store is up again. The push overwrites whatever
//     Redis holds for that breaker by then: a change made through another instance that still
//     reached Redis during the outage loses to it, the last push wins.
//   - A SetForced made while up, for a breaker whose earlier change is still pending, is
//     pending too, so that the two reach Redis in the order they were made.
//   - A forced state set elsewhere while Redis was down here is learnt at the first
//     ForcedStates after it is back (and by resilience.Fleet at its re-sync).
//   - Close drops what is still pending: it was this instance's alone.

// checkForced refuses what no store takes, so that a call made while down fails as it would up.
func checkForced(breaker string, f payrouter.Forced) error {
	if breaker == "" {
		return fmt.Errorf("statestore: set forced: empty breaker name")
	}
	switch f {
	case payrouter.ForcedNone, payrouter.ForcedOpen, payrouter.ForcedClosed:
		return nil
	}
	return fmt.Errorf("statestore: set forced %s: unknown forced state %q", breaker, f)
}

// SetForced records a forced state (payrouter.BreakerStateStore): on the coordination store
// while it is up, and here (pushed by the re-sync) while it is down, when it fails this very
// call, or while an earlier change to the same breaker is still pending.
func (s *Store) SetForced(ctx context.Context, breaker string, f payrouter.Forced) error {
	if err := checkForced(breaker, f); err != nil {
		return err
	}
	if s.up.Load() && !s.forcedPending(breaker) {
		err := s.primary.SetForced(ctx, breaker, f)
		if !s.fallBack(ctx, err) {
			if err == nil {
				s.mirrorOne(breaker, f)
			}
			return err
		}
	}
	s.mu.Lock()
	s.seq++
	s.pending[breaker] = pendingForced{f: f, version: s.seq}
	setForced(s.mirror, breaker, f)
	s.gen++
	s.mu.Unlock()
	if s.up.Load() {
		signal(s.pushSoon)
	}
	return nil
}

// ForcedStates returns every breaker with a forced state (payrouter.BreakerStateStore): the
// coordination store's, with the changes still pending here applied, while it is up; this
// instance's copy while it is down. The map is the caller's own.
func (s *Store) ForcedStates(ctx context.Context) (map[string]payrouter.Forced, error) {
	if s.up.Load() {
		s.mu.Lock()
		gen := s.gen
		s.mu.Unlock()
		got, err := s.primary.ForcedStates(ctx)
		if err == nil {
			return s.mirrorAll(got, gen), nil
		}
		if !s.fallBack(ctx, err) {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.mirror), nil
}

// mirrorAll applies the pending changes to states, the coordination store's forced states as
// read when gen was current, and makes the copy equal to the result, unless a forced state was
// written since that read: the copy then already holds something newer.
func (s *Store) mirrorAll(states map[string]payrouter.Forced, gen uint64) map[string]payrouter.Forced {
	got := maps.Clone(states)
	if got == nil {
		got = map[string]payrouter.Forced{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for b, p := range s.pending {
		setForced(got, b, p.f)
	}
	if gen == s.gen {
		s.mirror = maps.Clone(got)
		s.gen++
	}
	return got
}

// mirrorOne writes a forced state the coordination store took into the copy.
func (s *Store) mirrorOne(breaker string, f payrouter.Forced) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.pending[breaker]; ok {
		return // a newer change is pending
	}
	setForced(s.mirror, breaker, f)
	s.gen++
}

func (s *Store) forcedPending(breaker string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pending[breaker]
	return ok
}

// setForced sets breaker's forced state in m; ForcedNone deletes it.
func setForced(m map[string]payrouter.Forced, breaker string, f payrouter.Forced) {
	if f == payrouter.ForcedNone {
		delete(m, breaker)
		return
	}
	m[breaker] = f
}
