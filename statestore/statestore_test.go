package statestore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
)

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

// TestOutageMetByManyCallsIsOneTransition: many calls meeting the outage at once each get
// ErrDown and make one down transition: one log line, one OnChange.
func TestOutageMetByManyCallsIsOneTransition(t *testing.T) {
	h := start(t, newFake())
	h.fake.down.Store(true)

	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() {
			_, _, err := h.ReportOutcomes(t.Context(), "paywell/charge",
				payrouter.BreakerRules{Cooldown: time.Second}, payrouter.BreakerReport{Failures: 1, TrailingFailures: 1}, "i1")
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, ErrDown) {
			t.Fatalf("ReportOutcomes meeting the outage: %v, want ErrDown", err)
		}
	}
	if h.Up() {
		t.Fatal("Up() after calls failed with an unavailable error")
	}
	h.waitChanges(t, false)

	log := h.log.String()
	if n := logCount(log, "state_store.down"); n != 1 {
		t.Fatalf("state_store.down logged %d times, want once; log:\n%s", n, log)
	}
	if !strings.Contains(log, "connection refused") || !strings.Contains(log, "own breakers") {
		t.Fatalf("state_store.down does not give the error and what follows; log:\n%s", log)
	}
	since, reason, down := h.Down()
	if !down || since.IsZero() || !errors.Is(reason, errRefused) {
		t.Fatalf("Down() = %v, %v, %v; want since when and the error", since, reason, down)
	}
}

// TestCallerErrorsAreNotOutages: a caller's mistake, a refusal that is not the store being
// unavailable, and a caller whose own context ended say nothing of the store's health.
func TestCallerErrorsAreNotOutages(t *testing.T) {
	h := start(t, newFake())
	refused := errors.New("ERR script refused")
	h.fake.setFailForce("paywell/charge", refused)
	if err := h.ForceBreaker(t.Context(), "paywell/charge", payrouter.ForcedOpen, "i1"); !errors.Is(err, refused) || errors.Is(err, ErrDown) {
		t.Fatalf("ForceBreaker refused by the primary = %v, want its error, not ErrDown", err)
	}
	if got := h.fake.forcedNow(); len(got) != 0 {
		t.Fatalf("forced states after a refused ForceBreaker = %v, want none", got)
	}
	if !h.Up() {
		t.Fatal("went down on a refusal that is not an outage")
	}

	h.fake.down.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := h.BreakerStates(ctx, []string{"paywell/charge"}); err == nil || errors.Is(err, ErrDown) {
		t.Fatalf("BreakerStates with an ended context = %v, want the primary's error, not ErrDown", err)
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

func TestCloseClosesThePrimary(t *testing.T) {
	f := newFake()
	if err := New(f, Options{}).Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !f.closed.Load() {
		t.Fatal("Close left the primary's client open")
	}
}
