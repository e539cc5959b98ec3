package storetest

import (
	"maps"
	"testing"

	"github.com/payrouter/payrouter"
)

func testForcedStates(t *testing.T, s payrouter.BreakerStateStore) {
	ctx := t.Context()
	got, err := s.ForcedStates(ctx)
	if err != nil {
		t.Fatalf("ForcedStates: %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("ForcedStates of a new store = %v, want none", got)
	}

	// Each step applies to the state the previous ones left.
	steps := []struct {
		name    string
		breaker string
		forced  payrouter.Forced
		want    map[string]payrouter.Forced
	}{
		{"force open", "paywell/charge", payrouter.ForcedOpen,
			map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen}},
		{"another operation is its own breaker", "paywell/refund", payrouter.ForcedClosed,
			map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedOpen, "paywell/refund": payrouter.ForcedClosed}},
		{"force the other way", "paywell/charge", payrouter.ForcedClosed,
			map[string]payrouter.Forced{"paywell/charge": payrouter.ForcedClosed, "paywell/refund": payrouter.ForcedClosed}},
		{"none clears", "paywell/charge", payrouter.ForcedNone,
			map[string]payrouter.Forced{"paywell/refund": payrouter.ForcedClosed}},
		{"clearing a breaker never forced", "ding/charge", payrouter.ForcedNone,
			map[string]payrouter.Forced{"paywell/refund": payrouter.ForcedClosed}},
		{"clear the last", "paywell/refund", payrouter.ForcedNone,
			map[string]payrouter.Forced{}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if err := s.SetForced(ctx, step.breaker, step.forced); err != nil {
				t.Fatalf("SetForced(%s, %q): %v", step.breaker, step.forced, err)
			}
			got, err := s.ForcedStates(ctx)
			if err != nil {
				t.Fatalf("ForcedStates: %v", err)
			}
			if !maps.Equal(got, step.want) {
				t.Fatalf("ForcedStates = %v, want %v", got, step.want)
			}
		})
	}
}

func testForcedIsolation(t *testing.T, s payrouter.BreakerStateStore) {
	ctx := t.Context()
	if err := s.SetForced(ctx, "ding/charge", payrouter.ForcedOpen); err != nil {
		t.Fatalf("SetForced: %v", err)
	}
	got, err := s.ForcedStates(ctx)
	if err != nil {
		t.Fatalf("ForcedStates: %v", err)
	}
	got["ding/charge"] = payrouter.ForcedClosed
	got["tranglo/charge"] = payrouter.ForcedOpen

	again, err := s.ForcedStates(ctx)
	if err != nil {
		t.Fatalf("ForcedStates: %v", err)
	}
	if want := map[string]payrouter.Forced{"ding/charge": payrouter.ForcedOpen}; !maps.Equal(again, want) {
		t.Fatalf("ForcedStates after changing a returned map = %v, want %v", again, want)
	}
}

func testForcedInvalid(t *testing.T, s payrouter.BreakerStateStore) {
	tests := []struct {
		name    string
		breaker string
		forced  payrouter.Forced
	}{
		{"empty breaker name", "", payrouter.ForcedOpen},
		{"unknown state", "paywell/charge", payrouter.Forced("half_open")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.SetForced(t.Context(), tc.breaker, tc.forced); err == nil {
				t.Fatalf("SetForced(%q, %q) succeeded, want an error", tc.breaker, tc.forced)
			}
		})
	}
	got, err := s.ForcedStates(t.Context())
	if err != nil {
		t.Fatalf("ForcedStates: %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("ForcedStates after refused calls = %v, want none", got)
	}
}
