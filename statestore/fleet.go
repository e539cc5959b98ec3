package statestore

import (
	"context"
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
)

// The fleet's breakers and leases exist only in the coordination store: there is no local
// stand-in that would mean anything to the other instances. While it is down these calls fail at
// once with ErrDown, without touching the network, and their caller (resilience.Fleet, the
// prober's and the reconciler's leases) decides alone until it is up. Run's re-sync sends none
// of them again: resilience.Fleet re-syncs its own breakers from OnChange(true).

// fleetCall runs call on the coordination store unless it is down, and turns an unavailable
// error into one wrapping ErrDown (marking the store down), so that callers need check only
// ErrDown.
func (s *Store) fleetCall(ctx context.Context, what string, call func() error) error {
	if err := s.watch.Err(ErrDown); err != nil {
		return fmt.Errorf("statestore: %s: %w", what, err)
	}
	err := call()
	if s.fallBack(ctx, err) {
		return fmt.Errorf("statestore: %s: %w: %w", what, ErrDown, err)
	}
	return err
}

// ReportOutcomes adds one instance's counted calls to the fleet's counts
// (payrouter.FleetBreakers); ErrDown while the coordination store is down.
func (s *Store) ReportOutcomes(ctx context.Context, breaker string, rules payrouter.BreakerRules, r payrouter.BreakerReport, origin string) (opened bool, counts payrouter.BreakerCounts, err error) {
	err = s.fleetCall(ctx, "report outcomes", func() (err error) {
		opened, counts, err = s.primary.ReportOutcomes(ctx, breaker, rules, r, origin)
		return err
	})
	return opened, counts, err
}

// OpenBreaker opens the breaker fleet-wide (payrouter.FleetBreakers); ErrDown while the
// coordination store is down.
func (s *Store) OpenBreaker(ctx context.Context, breaker string, cooldown time.Duration, counts payrouter.BreakerCounts, trial payrouter.TrialGen, origin string) (opened bool, err error) {
	err = s.fleetCall(ctx, "open breaker", func() (err error) {
		opened, err = s.primary.OpenBreaker(ctx, breaker, cooldown, counts, trial, origin)
		return err
	})
	return opened, err
}

// TakeTrial takes a fleet-wide trial slot of a half-open breaker (payrouter.FleetBreakers);
// ErrDown while the coordination store is down.
func (s *Store) TakeTrial(ctx context.Context, breaker string, max int, ttl time.Duration) (gen payrouter.TrialGen, err error) {
	err = s.fleetCall(ctx, "take trial", func() (err error) {
		gen, err = s.primary.TakeTrial(ctx, breaker, max, ttl)
		return err
	})
	return gen, err
}

// ReturnTrial gives a trial slot back unused (payrouter.FleetBreakers); ErrDown while the
// coordination store is down.
func (s *Store) ReturnTrial(ctx context.Context, breaker string, gen payrouter.TrialGen) error {
	return s.fleetCall(ctx, "return trial", func() error {
		return s.primary.ReturnTrial(ctx, breaker, gen)
	})
}

// TrialSucceeded counts a successful trial (payrouter.FleetBreakers); ErrDown while the
// coordination store is down.
func (s *Store) TrialSucceeded(ctx context.Context, breaker string, gen payrouter.TrialGen, max int, origin string) (closed bool, err error) {
	err = s.fleetCall(ctx, "trial succeeded", func() (err error) {
		closed, err = s.primary.TrialSucceeded(ctx, breaker, gen, max, origin)
		return err
	})
	return closed, err
}

// CloseBreaker closes a half-open breaker fleet-wide (payrouter.FleetBreakers); ErrDown while
// the coordination store is down.
func (s *Store) CloseBreaker(ctx context.Context, breaker, origin string) (closed bool, err error) {
	err = s.fleetCall(ctx, "close breaker", func() (err error) {
		closed, err = s.primary.CloseBreaker(ctx, breaker, origin)
		return err
	})
	return closed, err
}

// ForceBreaker sets or clears a forced state fleet-wide (payrouter.FleetBreakers); ErrDown while
// the coordination store is down.
func (s *Store) ForceBreaker(ctx context.Context, breaker string, f payrouter.Forced, origin string) error {
	return s.fleetCall(ctx, "force breaker", func() error {
		return s.primary.ForceBreaker(ctx, breaker, f, origin)
	})
}

// ResetBreaker resets a breaker fleet-wide (payrouter.FleetBreakers); ErrDown while the
// coordination store is down.
func (s *Store) ResetBreaker(ctx context.Context, breaker, origin string) error {
	return s.fleetCall(ctx, "reset breaker", func() error {
		return s.primary.ResetBreaker(ctx, breaker, origin)
	})
}

// BreakerStates returns the fleet's state of each named breaker (payrouter.FleetBreakers);
// ErrDown while the coordination store is down.
func (s *Store) BreakerStates(ctx context.Context, breakers []string) (states map[string]payrouter.SharedBreaker, err error) {
	err = s.fleetCall(ctx, "breaker states", func() (err error) {
		states, err = s.primary.BreakerStates(ctx, breakers)
		return err
	})
	return states, err
}

// WatchBreakers calls fn with every breaker event until ctx ends or the subscription fails
// (payrouter.FleetBreakers); ErrDown at once while the coordination store is down, and when the
// subscription fails because it went down.
func (s *Store) WatchBreakers(ctx context.Context, subscribed func(), fn func(payrouter.BreakerEvent)) error {
	return s.fleetCall(ctx, "watch breakers", func() error {
		return s.primary.WatchBreakers(ctx, subscribed, fn)
	})
}

// HoldLease takes or renews a lease (payrouter.Leases); ErrDown while the coordination store is
// down.
func (s *Store) HoldLease(ctx context.Context, name, holder string, ttl time.Duration) (held bool, err error) {
	err = s.fleetCall(ctx, "hold lease", func() (err error) {
		held, err = s.primary.HoldLease(ctx, name, holder, ttl)
		return err
	})
	return held, err
}

// DropLease gives a lease up (payrouter.Leases); ErrDown while the coordination store is down.
func (s *Store) DropLease(ctx context.Context, name, holder string) error {
	return s.fleetCall(ctx, "drop lease", func() error {
		return s.primary.DropLease(ctx, name, holder)
	})
}
