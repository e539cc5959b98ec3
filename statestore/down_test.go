package statestore

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// TestWhileDown: nothing waits on the primary once it is known to be down: the fleet's calls fail
// with ErrDown, Ping says since when and why, and the primary is never called.
func TestWhileDown(t *testing.T) {
	h := start(t, newFake())
	if err := h.ForceBreaker(t.Context(), "ding/charge", payrouter.ForcedClosed, "i1"); err != nil {
		t.Fatalf("ForceBreaker: %v", err)
	}
	h.goDown(t)
	calls := h.fake.calls.Load()

	if err := h.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "i1"); !errors.Is(err, ErrDown) {
		t.Fatalf("ForceBreaker while down = %v, want ErrDown", err)
	}
	if _, err := h.BreakerStates(t.Context(), []string{"paywell/charge"}); !errors.Is(err, ErrDown) {
		t.Fatalf("BreakerStates while down = %v, want ErrDown", err)
	}

	err := h.Ping(t.Context())
	if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "since") {
		t.Fatalf("Ping while down = %v; want ErrDown saying since when and why", err)
	}
	if n := h.fake.calls.Load() - calls; n != 0 {
		t.Fatalf("the primary was called %d times while down, want never", n)
	}
	if got := h.fake.forcedNow(); !maps.Equal(got, map[string]payrouter.Forced{"ding/charge": payrouter.ForcedClosed}) {
		t.Fatalf("the primary's forced states changed while it was down: %v", got)
	}
	if !h.fake.down.Load() || h.Up() {
		t.Fatal("came up while the primary is down")
	}
}

// TestFleetWhileDown: the fleet's calls have no local stand-in; they fail at once with ErrDown,
// without calling the primary, and the first one to meet an outage marks the store down.
func TestFleetWhileDown(t *testing.T) {
	calls := []struct {
		name string
		call func(s *Store) error
	}{
		{"ReportOutcomes", func(s *Store) error {
			_, _, err := s.ReportOutcomes(t.Context(), "paywell/charge", payrouter.BreakerRules{}, payrouter.BreakerReport{Failures: 1}, "test")
			return err
		}},
		{"OpenBreaker", func(s *Store) error {
			_, err := s.OpenBreaker(t.Context(), "paywell/charge", time.Second, payrouter.BreakerCounts{}, 0, "i1")
			return err
		}},
		{"TakeTrial", func(s *Store) error { _, err := s.TakeTrial(t.Context(), "paywell/charge", 1, time.Second); return err }},
		{"ReturnTrial", func(s *Store) error { return s.ReturnTrial(t.Context(), "paywell/charge", 1) }},
		{"TrialSucceeded", func(s *Store) error {
			_, err := s.TrialSucceeded(t.Context(), "paywell/charge", 1, 1, "i1")
			return err
		}},
		{"CloseBreaker", func(s *Store) error { _, err := s.CloseBreaker(t.Context(), "paywell/charge", "i1"); return err }},
		{"ForceBreaker", func(s *Store) error {
			return s.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "i1")
		}},
		{"ResetBreaker", func(s *Store) error { return s.ResetBreaker(t.Context(), "paywell/charge", "i1") }},
		{"BreakerStates", func(s *Store) error {
			_, err := s.BreakerStates(t.Context(), []string{"paywell/charge"})
			return err
		}},
		{"WatchBreakers", func(s *Store) error { return s.WatchBreakers(t.Context(), nil, func(payrouter.BreakerEvent) {}) }},
		{"HoldLease", func(s *Store) error {
			_, err := s.HoldLease(t.Context(), "probe/paywell", "i1", time.Second)
			return err
		}},
		{"DropLease", func(s *Store) error { return s.DropLease(t.Context(), "probe/paywell", "i1") }},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, newFake())
			h.fake.down.Store(true)

			err := tc.call(h.Store)
			if !errors.Is(err, ErrDown) || !errors.Is(err, errRefused) {
				t.Fatalf("meeting the outage: %v, want ErrDown wrapping the primary's error", err)
			}
			if h.Up() {
				t.Fatal("still up after the primary failed")
			}

			calls := h.fake.calls.Load()
			if err := tc.call(h.Store); !errors.Is(err, ErrDown) {
				t.Fatalf("while down: %v, want ErrDown", err)
			}
			if h.fake.calls.Load() != calls {
				t.Fatal("the primary was called while down")
			}
		})
	}

	t.Run("up passes through", func(t *testing.T) {
		h := start(t, newFake())
		for _, tc := range calls {
			if tc.name == "WatchBreakers" {
				continue // blocks until its context ends
			}
			if err := tc.call(h.Store); err != nil {
				t.Fatalf("%s while up: %v", tc.name, err)
			}
		}
		if got, want := h.fake.calls.Load(), int64(len(calls)-1); got != want {
			t.Fatalf("primary called %d times, want %d", got, want)
		}
	})
}
