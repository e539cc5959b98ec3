package statestore

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// TestResync: when the primary returns, what was written during the outage is in it, and the
// Store is up again with OnChange and a log line saying so.
func TestResync(t *testing.T) {
	h := start(t, newFake())
	mustSave(t, h, charge("ch_before", payrouter.StatusProcessing, base))
	mustClaimNew(t, h, "k-before", fpA)
	h.goDown(t)

	// During the outage.
	mustSave(t, h, charge("ch_out", payrouter.StatusProcessing, base))
	mustSave(t, h, charge("ch_before", payrouter.StatusSucceeded, base)) // newer than the primary's
	mustClaimNew(t, h, "k1", fpA)
	mustComplete(t, h, "k1", record(fpA, 201, "one"))
	mustComplete(t, h, "k-before", record(fpA, 201, "before"))
	// Another instance stored its answer for k-other first; this one's must not replace it.
	mustClaimNew(t, h, "k-other", fpB)
	mustComplete(t, h, "k-other", record(fpB, 402, "ours"))
	mustComplete(t, h.fake.Store, "k-other", record(fpA, 201, "theirs"))
	// Claimed now, completed only after the primary returns.
	mustClaimNew(t, h, "k-late", fpA)
	if err := h.SetForced(t.Context(), "paywell/charge", payrouter.ForcedOpen); err != nil {
		t.Fatalf("SetForced: %v", err)
	}

	h.comeUp(t)
	h.waitChanges(t, false, true)
	if n := logCount(h.log.String(), "state_store.up"); n != 1 {
		t.Fatalf("state_store.up logged %d times, want once; log:\n%s", n, h.log.String())
	}

	primary := h.fake.Store
	t.Run("charges saved during the outage are in the primary", func(t *testing.T) {
		wantCharge(t, primary, "ch_out", payrouter.StatusProcessing)
		wantCharge(t, primary, "ch_before", payrouter.StatusSucceeded)
	})
	t.Run("records completed during the outage are in the primary", func(t *testing.T) {
		wantReplay(t, primary, "k1", fpA, record(fpA, 201, "one"))
		wantReplay(t, primary, "k-before", fpA, record(fpA, 201, "before"))
	})
	t.Run("a record the primary had first wins", func(t *testing.T) {
		wantReplay(t, primary, "k-other", fpA, record(fpA, 201, "theirs"))
		wantReplay(t, h, "k-other", fpA, record(fpA, 201, "theirs"))
	})
	t.Run("forced states set during the outage are in the primary", func(t *testing.T) {
		got, err := primary.ForcedStates(t.Context())
		if err != nil || got["paywell/charge"] != payrouter.ForcedOpen {
			t.Fatalf("primary's ForcedStates = %v, %v; want paywell/charge forced open", got, err)
		}
	})
	t.Run("what was pushed is forgotten locally", func(t *testing.T) {
		waitFor(t, "nothing pending", func() bool { return !h.pending() })
		h.localMu.RLock()
		local := h.local
		h.localMu.RUnlock()
		if _, err := local.Charge(t.Context(), "ch_out"); !errors.Is(err, payrouter.ErrNotFound) {
			t.Fatalf("local store still holds a pushed charge: %v", err)
		}
	})

	t.Run("a key claimed during the outage is answered locally, then pushed", func(t *testing.T) {
		claims := h.fake.claims.Load()
		wantClaimErr(t, h, "k-late", fpA, payrouter.ErrInFlight)
		if h.fake.claims.Load() != claims {
			t.Fatal("Claim of a key held locally went to the primary")
		}
		mustComplete(t, h, "k-late", record(fpA, 201, "late"))
		wantReplay(t, h, "k-late", fpA, record(fpA, 201, "late"))
		waitFor(t, "k-late pushed", func() bool { return !h.pending() })
		wantReplay(t, primary, "k-late", fpA, record(fpA, 201, "late"))
		wantReplay(t, h, "k-late", fpA, record(fpA, 201, "late"))
	})
}

// TestResyncRetriesWhatFailed: what the primary refuses stays pending, is read and listed
// locally meanwhile, and is pushed once the primary takes it.
func TestResyncRetriesWhatFailed(t *testing.T) {
	h := start(t, newFake())
	primary := h.fake.Store
	mustSave(t, primary, charge("ch_a", payrouter.StatusProcessing, base.Add(1*time.Second)))
	mustSave(t, primary, charge("ch_c", payrouter.StatusProcessing, base.Add(3*time.Second)))
	mustSave(t, primary, charge("ch_d", payrouter.StatusProcessing, base.Add(4*time.Second)))
	h.goDown(t)

	mustSave(t, h, charge("ch_a", payrouter.StatusSucceeded, base.Add(1*time.Second)))
	mustSave(t, h, charge("ch_b", payrouter.StatusProcessing, base.Add(2*time.Second)))
	refused := errors.New("script error")
	h.fake.setFailSave("ch_a", refused)
	h.fake.setFailSave("ch_b", refused)

	h.comeUp(t)
	waitFor(t, "push_failed logged", func() bool { return logCount(h.log.String(), "state_store.push_failed") > 0 })
	if !h.pending() {
		t.Fatal("nothing pending after the primary refused two charges")
	}

	t.Run("reads see the local copy", func(t *testing.T) {
		wantCharge(t, h, "ch_a", payrouter.StatusSucceeded)
		wantCharge(t, h, "ch_b", payrouter.StatusProcessing)
		wantCharge(t, h, "ch_c", payrouter.StatusProcessing)
	})
	t.Run("listing merges the local copies", func(t *testing.T) {
		tests := []struct {
			status payrouter.ChargeStatus
			limit  int
			want   []string
		}{
			{payrouter.StatusProcessing, 10, []string{"ch_b", "ch_c", "ch_d"}},
			{payrouter.StatusProcessing, 2, []string{"ch_b", "ch_c"}},
			{payrouter.StatusProcessing, 1, []string{"ch_b"}},
			{payrouter.StatusSucceeded, 10, []string{"ch_a"}},
			{payrouter.StatusDeclined, 10, []string{}},
			{payrouter.StatusProcessing, 0, []string{}},
		}
		for _, tc := range tests {
			got, err := h.ChargesByStatus(t.Context(), tc.status, tc.limit)
			if err != nil {
				t.Fatalf("ChargesByStatus: %v", err)
			}
			if ids := ids(got); !slices.Equal(ids, tc.want) {
				t.Errorf("ChargesByStatus(%s, %d) = %v, want %v", tc.status, tc.limit, ids, tc.want)
			}
		}
	})
	t.Run("a save while pending stays local", func(t *testing.T) {
		mustSave(t, h, charge("ch_b", payrouter.StatusDeclined, base.Add(2*time.Second)))
		wantCharge(t, h, "ch_b", payrouter.StatusDeclined)
		if _, err := primary.Charge(t.Context(), "ch_b"); !errors.Is(err, payrouter.ErrNotFound) {
			t.Fatalf("primary has ch_b while it refuses it: %v", err)
		}
	})

	h.fake.setFailSave("ch_a", nil)
	h.fake.setFailSave("ch_b", nil)
	waitFor(t, "pushed", func() bool { return !h.pending() })
	wantCharge(t, primary, "ch_a", payrouter.StatusSucceeded)
	wantCharge(t, primary, "ch_b", payrouter.StatusDeclined)
	if !h.Up() {
		t.Fatal("went down over errors that were not unavailable")
	}
}

// TestOutageDuringResync: a primary that fails again during the re-sync keeps the Store down
// and everything pending, until a later re-sync.
func TestOutageDuringResync(t *testing.T) {
	h := start(t, newFake())
	h.goDown(t)
	mustSave(t, h, charge("ch_1", payrouter.StatusProcessing, base))
	// Ping answers, but saving fails as if Redis died again right after.
	h.fake.setFailSave("ch_1", errRefused)
	h.fake.down.Store(false)
	waitFor(t, "a failed re-sync", func() bool {
		_, reason, _ := h.Down()
		return h.fake.pings.Load() > 2 && errors.Is(reason, errRefused)
	})
	if h.Up() {
		t.Fatal("up although the re-sync could not push")
	}
	h.fake.setFailSave("ch_1", nil)
	waitFor(t, "Up", h.Up)
	wantCharge(t, h.fake.Store, "ch_1", payrouter.StatusProcessing)
	h.waitChanges(t, false, true)
}

// TestReleaseDuringOutage: a key claimed on the primary and released while it was down is
// released there too, so the client's retry need not wait for the claim to expire.
func TestReleaseDuringOutage(t *testing.T) {
	h := start(t, newFake())
	mustClaimNew(t, h, "k", fpA)
	h.goDown(t)
	if err := h.Release(t.Context(), "k"); err != nil {
		t.Fatalf("Release: %v", err)
	}
	h.comeUp(t)
	waitFor(t, "nothing pending", func() bool { return !h.pending() })
	mustClaimNew(t, h, "k", fpA)
}

// TestForcedStatesSurviveOutage: a breaker forced open stays forced open while the shared store
// is down, since the Store mirrors what it read from it.
func TestForcedStatesSurviveOutage(t *testing.T) {
	h := start(t, newFake())
	if err := h.fake.Store.SetForced(t.Context(), "ding/charge", payrouter.ForcedOpen); err != nil {
		t.Fatal(err)
	}
	if err := h.SetForced(t.Context(), "paywell/refund", payrouter.ForcedClosed); err != nil {
		t.Fatal(err)
	}
	want := map[string]payrouter.Forced{"ding/charge": payrouter.ForcedOpen, "paywell/refund": payrouter.ForcedClosed}
	if got, err := h.ForcedStates(t.Context()); err != nil || !maps.Equal(got, want) {
		t.Fatalf("ForcedStates while up = %v, %v; want %v", got, err, want)
	}
	h.goDown(t)
	if got, err := h.ForcedStates(t.Context()); err != nil || !maps.Equal(got, want) {
		t.Fatalf("ForcedStates while down = %v, %v; want %v", got, err, want)
	}
}
