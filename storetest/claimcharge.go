package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// newClaimedCharge is a new charge as a request claims its key with it (Store.ClaimCharge):
// processing, naming the gateway and reference about to be called, every other field set.
func newClaimedCharge(id string) *payrouter.Charge {
	c := newCharge(id, payrouter.StatusProcessing, base)
	c.Refunded, c.RefundsReserved, c.Changing, c.ChangingSince = 0, 0, "", time.Time{}
	return c
}

// mustClaimCharge claims key with c and fails the test unless the claim is won and c stored.
func mustClaimCharge(t *testing.T, s payrouter.Store, key, fingerprint string, c *payrouter.Charge) payrouter.Hold {
	t.Helper()
	got, err := s.ClaimCharge(t.Context(), owner, key, fingerprint, longTTL, c)
	if err != nil || !got.Stored || !got.Hold.Held() || got.Record != nil || got.Prev != nil {
		t.Fatalf("ClaimCharge of a new key = %+v, %v; want the key held and the charge stored", got, err)
	}
	return got.Hold
}

// testClaimCharge: a new key is claimed and its charge stored at once, as the first version,
// where the reconciler finds it; completed, the key replays its record and writes nothing, not
// the charge, not its events; another body is a mismatch.
func testClaimCharge(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	c := newClaimedCharge("ch_claimed")
	want := keptForm(t, c)
	h := mustClaimCharge(t, s, "k-claimed", fpA, c)
	if c.Hold != h {
		t.Errorf("the charge's Hold = %+v; want the claim's %+v", c.Hold, h)
	}
	if c.Stored.Version != 1 {
		t.Errorf("the charge's Stored.Version = %d; want 1 (its first version)", c.Stored.Version)
	}
	got := mustGet(t, s, "ch_claimed")
	if d := diffCharge(got, want); d != "" {
		t.Errorf("stored charge: %s", d)
	}
	if got.Stored.Version != 1 {
		t.Errorf("stored at version %d; want 1", got.Stored.Version)
	}
	processing, err := s.ChargesByStatus(ctx, payrouter.StatusProcessing, 10)
	if err != nil || len(processing) != 1 || processing[0].ID != "ch_claimed" {
		t.Errorf("ChargesByStatus(processing) = %v, %v; want the claimed charge, for the reconciler", chargeIDs(processing), err)
	}
	wantClaimErr(t, s, "k-claimed", fpA, payrouter.ErrInFlight)

	c.Status, c.GatewayReference = payrouter.StatusSucceeded, "gw_1"
	rec := newRecord(fpA)
	if err := s.CompleteCharge(ctx, c, h, rec, longTTL); err != nil {
		t.Fatalf("CompleteCharge under the claim: %v", err)
	}
	events := allEvents(t, s, c.Owner, 100)

	for _, fp := range []string{fpA, fpB} {
		again := newClaimedCharge("ch_claimed")
		got, err := s.ClaimCharge(ctx, owner, "k-claimed", fp, longTTL, again)
		switch {
		case fp == fpB && !errors.Is(err, payrouter.ErrMismatch):
			t.Errorf("ClaimCharge with another fingerprint = %+v, %v; want ErrMismatch", got, err)
		case fp == fpA && err != nil:
			t.Fatalf("ClaimCharge of the completed key: %v", err)
		case fp == fpA && (got.Hold.Held() || got.Stored || got.Prev != nil):
			t.Errorf("ClaimCharge of the completed key = %+v; want its record only", got)
		case fp == fpA:
			if d := diffRecord(got.Record, rec); d != "" {
				t.Errorf("ClaimCharge of the completed key: %s", d)
			}
		}
		if again.Hold.Held() || again.Stored.Version != 0 {
			t.Errorf("the charge sent again has Hold %+v, Stored %+v; want neither set", again.Hold, again.Stored)
		}
	}
	if got := mustGet(t, s, "ch_claimed"); got.Status != payrouter.StatusSucceeded || got.Stored.Version != 2 {
		t.Errorf("after replays the charge is %s at version %d; want succeeded at 2, untouched", got.Status, got.Stored.Version)
	}
	if after := allEvents(t, s, c.Owner, 100); len(after) != len(events) {
		t.Errorf("replays wrote events: %v, then %v", eventTypes(events), eventTypes(after))
	}
}

// testClaimChargeInFlight: a key held is ErrInFlight to ClaimCharge, which stores nothing.
func testClaimChargeInFlight(t *testing.T, s payrouter.Store) {
	mustClaimCharge(t, s, "k-busy", fpA, newClaimedCharge("ch_busy"))
	for _, id := range []string{"ch_busy", "ch_busy_other"} {
		c := newClaimedCharge(id)
		if got, err := s.ClaimCharge(t.Context(), owner, "k-busy", fpB, longTTL, c); !errors.Is(err, payrouter.ErrInFlight) {
			t.Errorf("ClaimCharge of a key held = %+v, %v; want ErrInFlight", got, err)
		}
		if c.Hold.Held() {
			t.Errorf("the refused charge got a Hold %+v", c.Hold)
		}
	}
	if _, err := s.Charge(t.Context(), "ch_busy_other"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Errorf("Charge of a charge whose claim was refused: %v; want ErrNotFound", err)
	}
	if got := mustGet(t, s, "ch_busy"); got.Stored.Version != 1 {
		t.Errorf("the holder's charge is at version %d; want 1, untouched", got.Stored.Version)
	}
}

// testClaimChargeAfterStall: the request that claimed a key with its charge stalled (or its
// instance died) between its two writes. Once its hold runs out the same key is claimed again:
// the charge stored by the first is returned (Prev) and kept as it is, for the new holder to
// settle, and the stalled holder is fenced off: its later writes change nothing.
func testClaimChargeAfterStall(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	first := newClaimedCharge("ch_stalled")
	got, err := s.ClaimCharge(ctx, owner, "k-stalled", fpA, shortTTL, first)
	if err != nil || !got.Stored {
		t.Fatalf("ClaimCharge = %+v, %v; want the charge stored", got, err)
	}
	stale := got.Hold
	var later payrouter.Claimed
	waitFor(t, "the stalled hold to run out", func() (bool, error) {
		again := newClaimedCharge("ch_stalled")
		got, err := s.ClaimCharge(ctx, owner, "k-stalled", fpA, longTTL, again)
		switch {
		case errors.Is(err, payrouter.ErrInFlight):
			return false, nil
		case err != nil:
			return false, err
		case !got.Hold.Held() || got.Stored || got.Record != nil:
			return false, fmt.Errorf("ClaimCharge after the hold ran out = %+v; want the key held, the charge found, not stored", got)
		case again.Hold != got.Hold:
			return false, fmt.Errorf("the charge's Hold = %+v; want the claim's %+v", again.Hold, got.Hold)
		}
		later = got
		return true, nil
	})
	if later.Hold.Token <= stale.Token {
		t.Fatalf("the later hold's token %d is not larger than the stalled one's %d", later.Hold.Token, stale.Token)
	}
	if later.Prev == nil {
		// A store may leave a charge written in the same instant to the caller's read.
		later.Prev = mustGet(t, s, "ch_stalled")
	}
	if d := diffCharge(later.Prev, keptForm(t, first)); d != "" || later.Prev.Stored.Version != 1 {
		t.Errorf("the charge found (version %d): %s; want the first request's, at version 1", later.Prev.Stored.Version, d)
	}

	first.Status = payrouter.StatusSucceeded
	if err := s.SaveCharge(ctx, first); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Errorf("SaveCharge with the stalled hold = %v; want ErrHoldLost", err)
	}
	if err := s.CompleteCharge(ctx, first, stale, newRecord(fpA), longTTL); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Errorf("CompleteCharge with the stalled hold = %v; want ErrHoldLost", err)
	}
	prev := later.Prev
	prev.Hold = later.Hold
	prev.Status = payrouter.StatusDeclined
	if err := s.CompleteCharge(ctx, prev, later.Hold, newRecord(fpA), longTTL); err != nil {
		t.Fatalf("CompleteCharge by the later holder: %v", err)
	}
	if got := mustGet(t, s, "ch_stalled"); got.Status != payrouter.StatusDeclined || got.Stored.Version != 2 {
		t.Errorf("the charge is %s at version %d; want the later holder's declined, at 2", got.Status, got.Stored.Version)
	}
}

// testConcurrentClaimCharges: requests racing with one key store one charge, once, and the
// others are in flight; requests racing with keys of their own each store their charge.
func testConcurrentClaimCharges(t *testing.T, s payrouter.Store) {
	const racers = 32
	race := func(key func(i int) string, id func(i int) string) ([]payrouter.Claimed, []error) {
		got, errs := make([]payrouter.Claimed, racers), make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				got[i], errs[i] = s.ClaimCharge(t.Context(), owner, key(i), fpA, longTTL, newClaimedCharge(id(i)))
			})
		}
		close(start)
		wg.Wait()
		return got, errs
	}

	got, errs := race(func(int) string { return "k-one" }, func(int) string { return "ch_one" })
	won := 0
	for i := range racers {
		switch {
		case errs[i] == nil && got[i].Stored && got[i].Hold.Held():
			won++
		case errors.Is(errs[i], payrouter.ErrInFlight):
		default:
			t.Fatalf("ClaimCharge = %+v, %v; want the charge stored or ErrInFlight", got[i], errs[i])
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent claims of one key stored its charge; want exactly 1", won, racers)
	}
	if c := mustGet(t, s, "ch_one"); c.Stored.Version != 1 {
		t.Errorf("the charge is at version %d; want 1, written once", c.Stored.Version)
	}

	got, errs = race(func(i int) string { return fmt.Sprintf("k-own-%d", i) }, func(i int) string { return fmt.Sprintf("ch_own_%d", i) })
	for i := range racers {
		if errs[i] != nil || !got[i].Stored {
			t.Errorf("ClaimCharge of a key of its own = %+v, %v; want the charge stored", got[i], errs[i])
		}
		if c := mustGet(t, s, fmt.Sprintf("ch_own_%d", i)); c.Stored.Version != 1 {
			t.Errorf("charge %s at version %d; want 1", c.ID, c.Stored.Version)
		}
	}
}

// testClaimChargeInvalid: a charge that is not new, or no key, is refused with nothing held or
// stored.
func testClaimChargeInvalid(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	old := newClaimedCharge("ch_old")
	old.Stored.Version = 3
	if got, err := s.ClaimCharge(ctx, owner, "k-old", fpA, longTTL, old); err == nil {
		t.Errorf("ClaimCharge of a charge at version 3 = %+v; want an error", got)
	}
	if got, err := s.ClaimCharge(ctx, owner, "", fpA, longTTL, newClaimedCharge("ch_nokey")); err == nil {
		t.Errorf("ClaimCharge with no key = %+v; want an error", got)
	}
	if got, err := s.ClaimCharge(ctx, owner, "k-nil", fpA, longTTL, nil); err == nil {
		t.Errorf("ClaimCharge of no charge = %+v; want an error", got)
	}
	for _, id := range []string{"ch_old", "ch_nokey"} {
		if _, err := s.Charge(ctx, id); !errors.Is(err, payrouter.ErrNotFound) {
			t.Errorf("Charge(%s) after a refused ClaimCharge: %v; want ErrNotFound", id, err)
		}
	}
	mustClaimNew(t, s, "k-old", fpA)
	mustClaimNew(t, s, "k-nil", fpA)
}
