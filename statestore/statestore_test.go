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

// TestBreakerStateSuite: forced states through a Store behave as every
// payrouter.BreakerStateStore must, whether the coordination store is up (passed through) or
// down (served from this instance's memory).
func TestBreakerStateSuite(t *testing.T) {
	t.Run("up", func(t *testing.T) {
		storetest.RunBreakerState(t, func(t *testing.T) payrouter.BreakerStateStore {
			h := start(t, newFake())
			t.Cleanup(func() { h.Close() })
			return h
		})
	})
	t.Run("down", func(t *testing.T) {
		storetest.RunBreakerState(t, func(t *testing.T) payrouter.BreakerStateStore {
			h := start(t, newFake())
			h.goDown(t)
			calls := h.fake.calls.Load()
			t.Cleanup(func() {
				if n := h.fake.calls.Load() - calls; n != 0 {
					t.Errorf("the primary was called %d times while down, want never", n)
				}
				h.Close()
			})
			return h
		})
	})
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
	if err := h.SetForced(t.Context(), "", payrouter.ForcedOpen); err == nil {
		t.Fatal("SetForced with no breaker name succeeded")
	}
	refused := errors.New("ERR script refused")
	h.fake.setFailForce("paywell/charge", refused)
	if err := h.SetForced(t.Context(), "paywell/charge", payrouter.ForcedOpen); !errors.Is(err, refused) {
		t.Fatalf("SetForced refused by the primary = %v, want its error", err)
	}
	if got, err := h.ForcedStates(t.Context()); err != nil || len(got) != 0 {
		t.Fatalf("ForcedStates after a refused SetForced = %v, %v; want none", got, err)
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
