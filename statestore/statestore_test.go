package statestore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/storetest"
)

// TestStoreSuite: while the shared store is up the wrapper keeps every store semantic.
func TestStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T) payrouter.Store {
		h := start(t, newFake())
		t.Cleanup(func() { h.Close() })
		return h
	})
}

var base = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const (
	fpA = "sha256:aaaa"
	fpB = "sha256:bbbb"
)

func charge(id string, status payrouter.ChargeStatus, created time.Time) *payrouter.Charge {
	return &payrouter.Charge{ID: id, Status: status, Amount: 1999, Currency: "USD", CreatedAt: created}
}

func record(fp string, status int, body string) payrouter.IdempotencyRecord {
	return payrouter.IdempotencyRecord{Fingerprint: fp, Status: status, Body: []byte(body), CreatedAt: base}
}

func mustSave(t *testing.T, s payrouter.ChargeStore, c *payrouter.Charge) {
	t.Helper()
	if err := s.SaveCharge(t.Context(), c); err != nil {
		t.Fatalf("SaveCharge(%s): %v", c.ID, err)
	}
}

func wantCharge(t *testing.T, s payrouter.ChargeStore, id string, status payrouter.ChargeStatus) {
	t.Helper()
	c, err := s.Charge(t.Context(), id)
	if err != nil {
		t.Fatalf("Charge(%s): %v", id, err)
	}
	if c.Status != status {
		t.Fatalf("Charge(%s).Status = %s, want %s", id, c.Status, status)
	}
}

func mustClaimNew(t *testing.T, s payrouter.IdempotencyStore, key, fp string) {
	t.Helper()
	rec, err := s.Claim(t.Context(), key, fp, time.Hour)
	if rec != nil || err != nil {
		t.Fatalf("Claim(%s) = %+v, %v; want a new claim", key, rec, err)
	}
}

func mustComplete(t *testing.T, s payrouter.IdempotencyStore, key string, rec payrouter.IdempotencyRecord) {
	t.Helper()
	if err := s.Complete(t.Context(), key, rec, time.Hour); err != nil {
		t.Fatalf("Complete(%s): %v", key, err)
	}
}

func wantReplay(t *testing.T, s payrouter.IdempotencyStore, key, fp string, want payrouter.IdempotencyRecord) {
	t.Helper()
	rec, err := s.Claim(t.Context(), key, fp, time.Hour)
	if err != nil {
		t.Fatalf("Claim(%s) = %v, want a replay of %q", key, err, want.Body)
	}
	if rec == nil || rec.Status != want.Status || string(rec.Body) != string(want.Body) {
		t.Fatalf("Claim(%s) replayed %+v, want %q", key, rec, want.Body)
	}
}

func wantClaimErr(t *testing.T, s payrouter.IdempotencyStore, key, fp string, want error) {
	t.Helper()
	rec, err := s.Claim(t.Context(), key, fp, time.Hour)
	if !errors.Is(err, want) {
		t.Fatalf("Claim(%s) = %+v, %v; want %v", key, rec, err, want)
	}
}

func TestStartsUp(t *testing.T) {
	h := start(t, newFake())
	if !h.Up() {
		t.Fatal("a new Store is down, want up until a call says otherwise")
	}
	if since, reason, down := h.Down(); down || !since.IsZero() || reason != nil {
		t.Fatalf("Down() = %v, %v, %v; want nothing while up", since, reason, down)
	}
	if err := h.Ping(t.Context()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

// TestFirstFailedCallIsServedLocally: the call that meets the outage loses nothing, and many
// calls meeting it at once make one down transition: one log line, one OnChange.
func TestFirstFailedCallIsServedLocally(t *testing.T) {
	h := start(t, newFake())
	h.fake.down.Store(true)

	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Go(func() {
			c := charge("ch_"+string(rune('a'+i)), payrouter.StatusProcessing, base)
			errs <- h.SaveCharge(t.Context(), c)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("SaveCharge meeting the outage: %v, want it served locally", err)
		}
	}
	if h.Up() {
		t.Fatal("Up() after a call failed with an unavailable error")
	}
	wantCharge(t, h, "ch_a", payrouter.StatusProcessing)
	h.waitChanges(t, false)

	log := h.log.String()
	if n := logCount(log, "state_store.down"); n != 1 {
		t.Fatalf("state_store.down logged %d times, want once; log:\n%s", n, log)
	}
	if !strings.Contains(log, "connection refused") {
		t.Fatalf("state_store.down does not give the error; log:\n%s", log)
	}
	since, reason, down := h.Down()
	if !down || since.IsZero() || !errors.Is(reason, errRefused) {
		t.Fatalf("Down() = %v, %v, %v; want since when and the error", since, reason, down)
	}
}

// TestAnswersAboutDataAreNotOutages: ErrNotFound, a caller's mistake, and a caller whose own
// context ended say nothing of the shared store's health.
func TestAnswersAboutDataAreNotOutages(t *testing.T) {
	h := start(t, newFake())
	if _, err := h.Charge(t.Context(), "ch_missing"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Fatalf("Charge(ch_missing) = %v, want ErrNotFound", err)
	}
	if err := h.SaveCharge(t.Context(), &payrouter.Charge{}); err == nil {
		t.Fatal("SaveCharge with no id succeeded")
	}
	mustClaimNew(t, h, "k", fpA)
	wantClaimErr(t, h, "k", fpA, payrouter.ErrInFlight)

	h.fake.down.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.SaveCharge(ctx, charge("ch_1", payrouter.StatusProcessing, base)); err == nil {
		t.Fatal("SaveCharge with an ended context succeeded")
	}
	if !h.Up() {
		t.Fatal("went down on a call whose caller had given up")
	}
}

// TestPingNoticesOutage: /readyz's Ping, and the health loop with no traffic at all, both notice
// an outage.
func TestPingNoticesOutage(t *testing.T) {
	t.Run("Ping", func(t *testing.T) {
		h := start(t, newFake())
		h.fake.down.Store(true)
		err := h.Ping(t.Context())
		if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("Ping = %v, want ErrDown with the reason", err)
		}
		h.waitChanges(t, false)
	})
	t.Run("health loop", func(t *testing.T) {
		h := start(t, newFake())
		h.fake.down.Store(true)
		h.waitChanges(t, false)
		if h.Up() {
			t.Fatal("Up() after the health loop saw the outage")
		}
		h.comeUp(t)
		h.waitChanges(t, false, true)
	})
}

func TestRunReturnsWhenContextEnds(t *testing.T) {
	s := New(newFake(), Options{CheckUp: time.Hour})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatal("Run did not return after its context ended")
	}
}
