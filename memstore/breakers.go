package memstore

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/payrouter/payrouter"
)

// SetForced records a forced state for the breaker named "<gateway>/<operation>"; ForcedNone
// clears it.
func (s *Store) SetForced(ctx context.Context, breaker string, f payrouter.Forced) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if breaker == "" {
		return errors.New("memstore: set forced: empty breaker name")
	}
	switch f {
	case payrouter.ForcedNone, payrouter.ForcedOpen, payrouter.ForcedClosed:
	default:
		return fmt.Errorf("memstore: set forced: unknown forced state %q", f)
	}
	s.forcedMu.Lock()
	defer s.forcedMu.Unlock()
	if f == payrouter.ForcedNone {
		delete(s.forced, breaker)
		return nil
	}
	s.forced[breaker] = f
	return nil
}

// ForcedStates returns a copy of every breaker's forced state; it is empty, never nil, when no
// breaker is forced.
func (s *Store) ForcedStates(ctx context.Context) (map[string]payrouter.Forced, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.forcedMu.RLock()
	defer s.forcedMu.RUnlock()
	return maps.Clone(s.forced), nil
}
