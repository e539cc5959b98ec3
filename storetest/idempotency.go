package storetest

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

// Fingerprints of two different request bodies. The suite's keys belong to owner.
const (
	fpA = "sha256:aaaa"
	fpB = "sha256:bbbb"
)

func newRecord(fingerprint string) payrouter.IdempotencyRecord {
	return payrouter.IdempotencyRecord{
		Fingerprint: fingerprint,
		Status:      201,
		Header:      map[string]string{"Content-Type": "application/json", "Location": "/charge/ch_1"},
		Body:        []byte(`{"id":"ch_1","status":"succeeded"}`),
		CreatedAt:   base,
	}
}

// diffRecord describes how got differs from want, or returns "". As with charges, times are
// compared as instants and nil as empty.
func diffRecord(got *payrouter.IdempotencyRecord, want payrouter.IdempotencyRecord) string {
	if got == nil {
		return "got no record"
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		return fmt.Sprintf("CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt)
	}
	switch {
	case got.Fingerprint != want.Fingerprint:
		return fmt.Sprintf("Fingerprint = %q, want %q", got.Fingerprint, want.Fingerprint)
	case got.Status != want.Status:
		return fmt.Sprintf("Status = %d, want %d", got.Status, want.Status)
	case string(got.Body) != string(want.Body):
		return fmt.Sprintf("Body = %q, want %q", got.Body, want.Body)
	case len(got.Header) != len(want.Header) || (len(want.Header) > 0 && !maps.Equal(got.Header, want.Header)):
		return fmt.Sprintf("Header = %v, want %v", got.Header, want.Header)
	}
	return ""
}

// claim calls Claim with a long hold, for tests where expiry is not the point.
func claim(t *testing.T, s payrouter.Store, key, fingerprint string) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
	t.Helper()
	return s.Claim(t.Context(), owner, key, fingerprint, longTTL)
}

func mustClaimNew(t *testing.T, s payrouter.Store, key, fingerprint string) payrouter.Hold {
	t.Helper()
	return mustClaimNewFor(t, s, key, fingerprint, longTTL)
}

func mustClaimNewFor(t *testing.T, s payrouter.Store, key, fingerprint string, holdFor time.Duration) payrouter.Hold {
	t.Helper()
	rec, h, err := s.Claim(t.Context(), owner, key, fingerprint, holdFor)
	if rec != nil || err != nil || !h.Held() || h.Key != key {
		t.Fatalf("Claim(%s) = %+v, %+v, %v; want a new hold on %s", key, rec, h, err, key)
	}
	return h
}

func mustComplete(t *testing.T, s payrouter.Store, h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) {
	t.Helper()
	if err := s.Complete(t.Context(), h, rec, ttl); err != nil {
		t.Fatalf("Complete(%s): %v", h.Key, err)
	}
}

func wantReplay(t *testing.T, s payrouter.Store, key, fingerprint string, want payrouter.IdempotencyRecord) {
	t.Helper()
	rec, h, err := claim(t, s, key, fingerprint)
	if err != nil {
		t.Fatalf("Claim(%s) of a completed key: %v", key, err)
	}
	if h.Held() {
		t.Fatalf("Claim(%s) of a completed key gave a hold %+v; want none", key, h)
	}
	if d := diffRecord(rec, want); d != "" {
		t.Fatalf("Claim(%s) replayed: %s", key, d)
	}
}

func wantClaimErr(t *testing.T, s payrouter.Store, key, fingerprint string, want error) {
	t.Helper()
	rec, h, err := claim(t, s, key, fingerprint)
	if !errors.Is(err, want) {
		t.Fatalf("Claim(%s, %s) = %+v, %v; want %v", key, fingerprint, rec, err, want)
	}
	if rec != nil || h.Held() {
		t.Fatalf("Claim(%s, %s) returned a record or a hold with %v", key, fingerprint, err)
	}
}

func testClaimNew(t *testing.T, s payrouter.Store) {
	mustClaimNew(t, s, "k-new", fpA)
	// In flight with another fingerprint is a conflict, not a mismatch: the first request may yet
	// be released, and then the other body is a legitimate first request.
	for _, fp := range []string{fpA, fpB} {
		wantClaimErr(t, s, "k-new", fp, payrouter.ErrInFlight)
	}
	mustClaimNew(t, s, "k-other", fpA)
}

func testCompleteReplay(t *testing.T, s payrouter.Store) {
	h := mustClaimNew(t, s, "k-replay", fpA)
	rec := newRecord(fpA)
	mustComplete(t, s, h, rec, longTTL)

	// Replays are repeatable, and a mismatch does not disturb the record.
	wantReplay(t, s, "k-replay", fpA, rec)
	wantClaimErr(t, s, "k-replay", fpB, payrouter.ErrMismatch)
	wantReplay(t, s, "k-replay", fpA, rec)

	t.Run("empty header and body", func(t *testing.T) {
		bare := payrouter.IdempotencyRecord{Fingerprint: fpA, Status: 202, CreatedAt: base}
		h := mustClaimNew(t, s, "k-bare", fpA)
		mustComplete(t, s, h, bare, longTTL)
		wantReplay(t, s, "k-bare", fpA, bare)
	})
}

func testCompleteSetsCreatedAt(t *testing.T, s payrouter.Store) {
	before := time.Now().Add(-time.Minute) // slack for a store's clock not quite ours
	rec := newRecord(fpA)
	rec.CreatedAt = time.Time{}
	h := mustClaimNew(t, s, "k-created", fpA)
	mustComplete(t, s, h, rec, longTTL)
	got, _, err := claim(t, s, "k-created", fpA)
	if err != nil || got == nil {
		t.Fatalf("Claim = %+v, %v; want the record", got, err)
	}
	if got.CreatedAt.Before(before) {
		t.Fatalf("CreatedAt = %v, want it set to the time of Complete", got.CreatedAt)
	}
}

func testFirstCompleteWins(t *testing.T, s payrouter.Store) {
	h := mustClaimNew(t, s, "k-twice", fpA)
	first := newRecord(fpA)
	mustComplete(t, s, h, first, longTTL)
	second := newRecord(fpB)
	second.Status = 402
	second.Body = []byte(`{"type":"/problems/card-declined"}`)
	mustComplete(t, s, h, second, longTTL)

	wantReplay(t, s, "k-twice", fpA, first)
	wantClaimErr(t, s, "k-twice", fpB, payrouter.ErrMismatch)
}

// testCompleteUnclaimed: a holder whose hold ran out (it was slow, not crashed) still stores its
// answer while nobody took the key, since a gateway was asked and a retry must not charge again.
//
// The store's clock decides: the hold runs out after holdFor, and the claim counts as gone one
// holdFor later. So the test waits on the store (Peek finds the key no longer in flight) rather
// than sleeping a guess, and completes at once; should the machine stall it past the claim's
// end too (Complete then rightly refuses), it tries again with a hold twice as long. A store
// that refuses every time fails after the longest.
func testCompleteUnclaimed(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	rec := newRecord(fpA)
	for hold := shortTTL; hold <= 32*shortTTL; hold *= 2 {
		key := "k-unclaimed-" + hold.String()
		h := mustClaimNewFor(t, s, key, fpA, hold)
		waitFor(t, "the hold to run out", func() (bool, error) {
			_, err := s.Peek(ctx, key, fpA)
			if errors.Is(err, payrouter.ErrInFlight) {
				return false, nil
			}
			return true, err
		})
		err := s.Complete(ctx, h, rec, longTTL)
		if errors.Is(err, payrouter.ErrHoldLost) {
			t.Logf("Complete with a hold of %v came after the claim's end (%v); again with a longer hold", hold, err)
			continue
		}
		if err != nil {
			t.Fatalf("Complete after the hold ran out, nobody having taken the key: %v", err)
		}
		wantReplay(t, s, key, fpA, rec)
		return
	}
	t.Fatal("Complete after the hold ran out was refused every time, the longest hold included; want the answer stored while nobody took the key")
}

// testHoldLost: a holder that stalled past its hold, after a later request took the key, can
// change nothing: not the answer, not the charge, not the hold. The later request keeps the key.
func testHoldLost(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	stale := mustClaimNewFor(t, s, "k-fenced", fpA, shortTTL)
	c := newCharge("ch_fenced", payrouter.StatusProcessing, base)
	c.Hold = stale
	if err := s.SaveCharge(ctx, c); err != nil {
		t.Fatalf("SaveCharge under a live hold: %v", err)
	}
	var later payrouter.Hold
	waitFor(t, "the stalled hold to run out", func() (bool, error) {
		rec, h, err := s.Claim(ctx, owner, "k-fenced", fpA, longTTL)
		switch {
		case errors.Is(err, payrouter.ErrInFlight):
			return false, nil
		case err != nil:
			return false, err
		case rec != nil || !h.Held():
			return false, fmt.Errorf("claim after the hold ran out = %+v, %+v; want a new hold", rec, h)
		}
		later = h
		return true, nil
	})
	if later.Token <= stale.Token {
		t.Fatalf("the later hold's token %d is not larger than the stalled one's %d", later.Token, stale.Token)
	}

	c.Status = payrouter.StatusSucceeded
	if err := s.SaveCharge(ctx, c); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Errorf("SaveCharge with the stalled hold = %v; want ErrHoldLost", err)
	}
	if got := mustGet(t, s, "ch_fenced"); got.Status != payrouter.StatusProcessing {
		t.Errorf("charge after a refused save is %s; want processing", got.Status)
	}
	if err := s.Complete(ctx, stale, newRecord(fpA), longTTL); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Errorf("Complete with the stalled hold = %v; want ErrHoldLost", err)
	}
	if err := s.CompleteCharge(ctx, c, stale, newRecord(fpA), longTTL); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Errorf("CompleteCharge with the stalled hold = %v; want ErrHoldLost", err)
	}
	if got := mustGet(t, s, "ch_fenced"); got.Status != payrouter.StatusProcessing {
		t.Errorf("charge after a refused CompleteCharge is %s; want processing", got.Status)
	}
	if err := s.Renew(ctx, stale, longTTL); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Errorf("Renew of the stalled hold = %v; want ErrHoldLost", err)
	}
	if err := s.Release(ctx, stale); err != nil {
		t.Errorf("Release of the stalled hold: %v", err)
	}
	wantClaimErr(t, s, "k-fenced", fpA, payrouter.ErrInFlight) // still the later request's

	c.Hold = later
	rec := newRecord(fpA)
	if err := s.CompleteCharge(ctx, c, later, rec, longTTL); err != nil {
		t.Fatalf("CompleteCharge with the later hold: %v", err)
	}
	if got := mustGet(t, s, "ch_fenced"); got.Status != payrouter.StatusSucceeded {
		t.Errorf("charge after the later hold's CompleteCharge is %s; want succeeded", got.Status)
	}
	wantReplay(t, s, "k-fenced", fpA, rec)
}

// testRenew: a renewed hold outlives its first holdFor; a renewal never revives a key that
// completed.
func testRenew(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	h := mustClaimNewFor(t, s, "k-renew", fpA, shortTTL)
	if err := s.Renew(ctx, h, longTTL); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	time.Sleep(3 * shortTTL)
	wantClaimErr(t, s, "k-renew", fpA, payrouter.ErrInFlight)
	rec := newRecord(fpA)
	mustComplete(t, s, h, rec, longTTL)
	if err := s.Renew(ctx, h, longTTL); !errors.Is(err, payrouter.ErrHoldLost) {
		t.Errorf("Renew after Complete = %v; want ErrHoldLost", err)
	}
	wantReplay(t, s, "k-renew", fpA, rec)
}

func testRelease(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a released key can be claimed again", func(t *testing.T) {
			h := mustClaimNew(t, s, "k-rel", fpA)
			if err := s.Release(ctx, h); err != nil {
				t.Fatalf("Release: %v", err)
			}
			mustClaimNew(t, s, "k-rel", fpB)
			wantClaimErr(t, s, "k-rel", fpB, payrouter.ErrInFlight)
		}},
		{"releasing an unknown key is not an error", func(t *testing.T) {
			if err := s.Release(ctx, payrouter.Hold{Key: "k-never", Token: 1 << 60}); err != nil {
				t.Fatalf("Release: %v", err)
			}
			mustClaimNew(t, s, "k-never", fpA)
		}},
		{"release after complete keeps the answer", func(t *testing.T) {
			h := mustClaimNew(t, s, "k-rel-done", fpA)
			rec := newRecord(fpA)
			mustComplete(t, s, h, rec, longTTL)
			if err := s.Release(ctx, h); err != nil {
				t.Fatalf("Release: %v", err)
			}
			wantReplay(t, s, "k-rel-done", fpA, rec)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, tc.run)
	}
}

func testRecordIsolation(t *testing.T, s payrouter.Store) {
	want := newRecord(fpA)
	given := newRecord(fpA)
	h := mustClaimNew(t, s, "k-iso", fpA)
	mustComplete(t, s, h, given, longTTL)
	given.Body[0] = 'X'
	given.Header["Location"] = "/elsewhere"
	wantReplay(t, s, "k-iso", fpA, want)

	got, _, err := claim(t, s, "k-iso", fpA)
	if err != nil || got == nil {
		t.Fatalf("Claim = %+v, %v; want the record", got, err)
	}
	got.Body[0] = 'X'
	got.Header["Location"] = "/elsewhere"
	got.Header["Extra"] = "1"
	wantReplay(t, s, "k-iso", fpA, want)
}

func testCompletedExpiry(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	h := mustClaimNew(t, s, "k-ttl", fpA)
	rec := newRecord(fpA)
	mustComplete(t, s, h, rec, shortTTL)
	wantReplay(t, s, "k-ttl", fpA, rec)

	// Each poll before expiry replays; the first after it is a new claim, now held by the test.
	waitFor(t, "completed record to expire", func() (bool, error) {
		got, h, err := s.Claim(ctx, owner, "k-ttl", fpB, longTTL)
		switch {
		case errors.Is(err, payrouter.ErrMismatch):
			return false, nil
		case err != nil:
			return false, err
		}
		return got == nil && h.Held(), nil
	})
	wantClaimErr(t, s, "k-ttl", fpA, payrouter.ErrInFlight)
}

func testInFlightExpiry(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	mustClaimNewFor(t, s, "k-crashed", fpA, shortTTL)
	wantClaimErr(t, s, "k-crashed", fpA, payrouter.ErrInFlight)

	waitFor(t, "a crashed holder's claim to expire", func() (bool, error) {
		got, _, err := s.Claim(ctx, owner, "k-crashed", fpA, longTTL)
		switch {
		case errors.Is(err, payrouter.ErrInFlight):
			return false, nil
		case err != nil:
			return false, err
		case got != nil:
			return false, fmt.Errorf("claim returned a record %+v for a key never completed", got)
		}
		return true, nil
	})
	// The new claim takes the longer TTL of its own request.
	wantClaimErr(t, s, "k-crashed", fpA, payrouter.ErrInFlight)
}

// testConcurrentClaims: requests with one key racing each other, as a client's retries do.
// Exactly one may go to a gateway; once it has completed, all of them get its answer.
func testConcurrentClaims(t *testing.T, s payrouter.Store) {
	const racers = 50
	ctx := t.Context()
	type result struct {
		rec  *payrouter.IdempotencyRecord
		hold payrouter.Hold
		err  error
	}
	race := func() []result {
		results := make([]result, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range results {
			wg.Go(func() {
				<-start
				rec, h, err := s.Claim(ctx, owner, "k-race", fpA, longTTL)
				results[i] = result{rec, h, err}
			})
		}
		close(start)
		wg.Wait()
		return results
	}

	won := 0
	var winner payrouter.Hold
	for _, r := range race() {
		switch {
		case r.err == nil && r.rec == nil && r.hold.Held():
			won++
			winner = r.hold
		case errors.Is(r.err, payrouter.ErrInFlight):
		default:
			t.Fatalf("Claim = %+v, %v; want a new claim or ErrInFlight", r.rec, r.err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent claims won the key, want exactly 1", won, racers)
	}

	rec := newRecord(fpA)
	mustComplete(t, s, winner, rec, longTTL)
	for _, r := range race() {
		if r.err != nil {
			t.Fatalf("Claim of the completed key: %v", r.err)
		}
		if d := diffRecord(r.rec, rec); d != "" {
			t.Fatalf("Claim of the completed key: %s", d)
		}
	}
}

func testIdempotencyInvalid(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	rec := newRecord(fpA)
	tests := []struct {
		name string
		call func() error
	}{
		{"claim empty key", func() error { _, _, err := s.Claim(ctx, owner, "", fpA, longTTL); return err }},
		{"claim zero hold", func() error { _, _, err := s.Claim(ctx, owner, "k-inv", fpA, 0); return err }},
		{"claim negative hold", func() error { _, _, err := s.Claim(ctx, owner, "k-inv", fpA, -time.Second); return err }},
		{"complete without a hold", func() error { return s.Complete(ctx, payrouter.Hold{Key: "k-inv"}, rec, longTTL) }},
		{"complete empty key", func() error { return s.Complete(ctx, payrouter.Hold{Token: 1}, rec, longTTL) }},
		{"complete zero ttl", func() error { return s.Complete(ctx, payrouter.Hold{Key: "k-inv", Token: 1}, rec, 0) }},
		{"complete negative ttl", func() error { return s.Complete(ctx, payrouter.Hold{Key: "k-inv", Token: 1}, rec, -time.Second) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("succeeded, want an error")
			}
			for _, sentinel := range []error{payrouter.ErrInFlight, payrouter.ErrMismatch, payrouter.ErrNotFound, payrouter.ErrHoldLost} {
				if errors.Is(err, sentinel) {
					t.Fatalf("error %v is %v, want a plain error: the caller's bug, not the key's state", err, sentinel)
				}
			}
		})
	}
	// None of the refused calls may have taken or stored the key.
	mustClaimNew(t, s, "k-inv", fpA)
}

// testCompleteCharge: CompleteCharge is SaveCharge and Complete in one step: the charge is
// stored (in its status, its token not kept, out of the status it had) and its key replays the
// record, first complete still winning.
func testCompleteCharge(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	h := mustClaimNew(t, s, "k-charge", fpA)
	first := newCharge("ch_done", payrouter.StatusProcessing, base)
	mustSave(t, s, first)
	final := newCharge("ch_done", payrouter.StatusSucceeded, base)
	final.Stored = first.Stored
	rec := newRecord(fpA)
	if err := s.CompleteCharge(ctx, final, h, rec, longTTL); err != nil {
		t.Fatalf("CompleteCharge: %v", err)
	}
	if d := diffCharge(mustGet(t, s, "ch_done"), keptForm(t, final)); d != "" {
		t.Errorf("charge after CompleteCharge: %s", d)
	}
	if list, err := s.ChargesByStatus(ctx, payrouter.StatusProcessing, 10); err != nil || len(list) != 0 {
		t.Errorf("processing charges after CompleteCharge moved ch_done on: %d, %v; want none", len(list), err)
	}
	wantReplay(t, s, "k-charge", fpA, rec)

	later := newRecord(fpA)
	later.Status = 202
	if err := s.CompleteCharge(ctx, final, h, later, longTTL); err != nil {
		t.Fatalf("CompleteCharge again: %v", err)
	}
	wantReplay(t, s, "k-charge", fpA, rec)

	if err := s.CompleteCharge(ctx, nil, h, rec, longTTL); err == nil {
		t.Error("CompleteCharge with a nil charge: no error")
	}
}

// testPeek: Peek answers what Claim would, and takes nothing: a key peeked at is still free.
func testPeek(t *testing.T, s payrouter.Store) {
	ctx := t.Context()
	if rec, err := s.Peek(ctx, "k-peek", fpA); rec != nil || err != nil {
		t.Fatalf("Peek of a new key = %+v, %v; want nothing", rec, err)
	}
	h := mustClaimNew(t, s, "k-peek", fpA) // the peek took nothing
	if _, err := s.Peek(ctx, "k-peek", fpA); !errors.Is(err, payrouter.ErrInFlight) {
		t.Fatalf("Peek of a held key = %v; want ErrInFlight", err)
	}
	rec := newRecord(fpA)
	mustComplete(t, s, h, rec, longTTL)
	got, err := s.Peek(ctx, "k-peek", fpA)
	if err != nil {
		t.Fatalf("Peek of a completed key: %v", err)
	}
	if d := diffRecord(got, rec); d != "" {
		t.Fatalf("Peek of a completed key: %s", d)
	}
	if _, err := s.Peek(ctx, "k-peek", fpB); !errors.Is(err, payrouter.ErrMismatch) {
		t.Fatalf("Peek with another fingerprint = %v; want ErrMismatch", err)
	}
	mustClaimNewFor(t, s, "k-peek-held", fpA, shortTTL)
	waitFor(t, "a hold to run out, seen by Peek", func() (bool, error) {
		rec, err := s.Peek(ctx, "k-peek-held", fpA)
		if errors.Is(err, payrouter.ErrInFlight) {
			return false, nil
		}
		return rec == nil && err == nil, err
	})
}
