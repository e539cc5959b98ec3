package statestore

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// TestWhileDown: every call is answered locally, at once, and the primary is never called.
func TestWhileDown(t *testing.T) {
	h := start(t, newFake())
	// Before the outage: a charge in the shared store, and a key claimed there and in flight.
	mustSave(t, h, charge("ch_before", payrouter.StatusProcessing, base))
	mustClaimNew(t, h, "k-before", fpA)
	h.goDown(t)
	calls := h.fake.calls.Load()

	mustSave(t, h, charge("ch_out", payrouter.StatusProcessing, base.Add(time.Second)))
	mustSave(t, h, charge("ch_out2", payrouter.StatusProcessing, base))
	wantCharge(t, h, "ch_out", payrouter.StatusProcessing)
	got, err := h.ChargesByStatus(t.Context(), payrouter.StatusProcessing, 10)
	if err != nil {
		t.Fatalf("ChargesByStatus: %v", err)
	}
	if ids := ids(got); !slices.Equal(ids, []string{"ch_out2", "ch_out"}) {
		t.Fatalf("ChargesByStatus = %v, want the charges saved locally, oldest first", ids)
	}

	mustClaimNew(t, h, "k1", fpA)
	wantClaimErr(t, h, "k1", fpA, payrouter.ErrInFlight)
	mustComplete(t, h, "k1", record(fpA, 201, "one"))
	wantReplay(t, h, "k1", fpA, record(fpA, 201, "one"))
	wantClaimErr(t, h, "k1", fpB, payrouter.ErrMismatch)

	t.Run("a key this instance holds on the primary stays in flight", func(t *testing.T) {
		wantClaimErr(t, h, "k-before", fpA, payrouter.ErrInFlight)
	})

	if err := h.SetForced(t.Context(), "paywell/charge", payrouter.ForcedOpen); err != nil {
		t.Fatalf("SetForced: %v", err)
	}
	forced, err := h.ForcedStates(t.Context())
	if err != nil || !maps.Equal(forced, map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen}) {
		t.Fatalf("ForcedStates = %v, %v; want the local change", forced, err)
	}

	err = h.Ping(t.Context())
	if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "since") {
		t.Fatalf("Ping while down = %v; want ErrDown saying since when and why", err)
	}

	if n := h.fake.calls.Load() - calls; n != 0 {
		t.Fatalf("the primary was called %d times while down, want never", n)
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
			_, err := s.OpenBreaker(t.Context(), "paywell/charge", time.Second, payrouter.BreakerCounts{}, "i1")
			return err
		}},
		{"TakeTrial", func(s *Store) error { _, err := s.TakeTrial(t.Context(), "paywell/charge", 1, time.Second); return err }},
		{"ReturnTrial", func(s *Store) error { return s.ReturnTrial(t.Context(), "paywell/charge") }},
		{"TrialSucceeded", func(s *Store) error { _, err := s.TrialSucceeded(t.Context(), "paywell/charge", 1, "i1"); return err }},
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

func ids(cs []*payrouter.Charge) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}
