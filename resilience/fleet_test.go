package resilience_test

// The fleet against a real redis-server: two instances (two Domains, two Fleets, two stores)
// sharing one Redis, as two payrouter processes do.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/redisstore/redistest"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/statestore"
)

// fleetRules trip after 3 failures in a row and cool down quickly, so that tests see half-open.
var fleetRules = resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 3, Cooldown: 400 * time.Millisecond}, HalfOpenRequests: 1}

// fleetTestTimeout bounds each call to Redis. These tests check what the fleet decides, not how
// fast Redis answers: the production default (100ms) is missed now and then by a loaded machine
// running -race, which once failed a test's first Sync.
const fleetTestTimeout = time.Second

// instance is one payrouter instance's breakers, tied to the fleet.
type instance struct {
	d     *resilience.Domains
	fleet *resilience.Fleet
}

func (in instance) breaker() *resilience.Breaker { return in.d.Breaker("paywell", payrouter.OpCharge) }

// startInstance starts an instance named origin on the Redis at url, synced and running until the
// test ends.
func startInstance(t *testing.T, url, origin string, s resilience.BreakerSettings) instance {
	t.Helper()
	store, err := redisstore.Open(url, redisstore.Options{Prefix: "fleettest:" + t.Name() + ":", Timeout: fleetTestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	d := resilience.NewDomains([]resilience.GatewaySettings{{Name: "paywell", Breaker: s}}, nil)
	f := resilience.NewFleet(d, store, resilience.FleetOptions{Origin: origin, Refresh: 200 * time.Millisecond, Timeout: fleetTestTimeout})
	if err := f.Sync(t.Context()); err != nil {
		t.Fatalf("Sync at start: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { f.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait(); store.Close(); d.Close() })
	deadline := time.Now().Add(2 * time.Second)
	for !f.Watching() {
		if time.Now().After(deadline) {
			t.Fatal("the fleet is not subscribed to its events 2s after Run")
		}
		time.Sleep(time.Millisecond)
	}
	return instance{d: d, fleet: f}
}

// fail reports n failed calls through in's breaker; each must be admitted.
func fail(t *testing.T, in instance, n int) {
	t.Helper()
	for i := range n {
		done, err := in.breaker().Allow()
		if err != nil {
			t.Fatalf("failure %d of %d: Allow: %v", i+1, n, err)
		}
		done(payrouter.OutcomeUnavailable)
	}
}

// waitState polls until in's breaker shows want, and returns how long that took.
func waitState(t *testing.T, in instance, want resilience.State, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if got := in.breaker().State(); got == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: state %s after %v, want %s", what, in.breaker().State(), within, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestFleetTripOnOneInstanceOpensTheOther(t *testing.T) {
	srv := redistest.Start(t)
	a, b := startInstance(t, srv.URL(), "A", fleetRules), startInstance(t, srv.URL(), "B", fleetRules)
	fail(t, a, 3)
	took := waitState(t, b, resilience.StateOpen, time.Second, "B after 3 failures on A")
	if took > 100*time.Millisecond {
		t.Errorf("B learned that A opened paywell/charge after %v; the fleet promises 100ms", took)
	}
	if _, err := b.breaker().Allow(); !errors.Is(err, resilience.ErrOpen) {
		t.Errorf("B admits a call while open fleet-wide: %v", err)
	}
}

// The fleet's counts trip a breaker that no instance's own counts would: 2 failures on A and 2 on
// B with a threshold of 4.
func TestFleetCountsTripAcrossInstances(t *testing.T) {
	srv := redistest.Start(t)
	rules := fleetRules
	rules.ConsecutiveFailures = 4
	a, b := startInstance(t, srv.URL(), "A", rules), startInstance(t, srv.URL(), "B", rules)
	fail(t, a, 2)
	waitShared(t, srv.URL(), func(s payrouter.SharedBreaker) bool { return s.Counts.ConsecutiveFailures == 2 }, "A's 2 failures counted in Redis")
	fail(t, b, 2)
	waitState(t, a, resilience.StateOpen, time.Second, "A after 2 failures on A and 2 on B")
	waitState(t, b, resilience.StateOpen, time.Second, "B after 2 failures on A and 2 on B")
}

// After the cooldown, exactly HalfOpenRequests trial calls run fleet-wide; a failed trial opens
// the breaker again everywhere, a successful one closes it everywhere.
func TestFleetOneTrialFleetWide(t *testing.T) {
	srv := redistest.Start(t)
	a, b := startInstance(t, srv.URL(), "A", fleetRules), startInstance(t, srv.URL(), "B", fleetRules)
	for round, outcome := range []payrouter.Outcome{payrouter.OutcomeUnavailable, payrouter.OutcomeSucceeded} {
		if round == 0 {
			fail(t, a, 3)
		}
		waitState(t, b, resilience.StateOpen, time.Second, "B before the cooldown")
		waitState(t, a, resilience.StateHalfOpen, 2*fleetRules.Cooldown, "A after the cooldown")
		waitState(t, b, resilience.StateHalfOpen, 2*fleetRules.Cooldown, "B after the cooldown")

		var admitted atomic.Int64
		var dones []func(payrouter.Outcome)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 20 {
			in := a
			if i%2 == 1 {
				in = b
			}
			wg.Go(func() {
				done, err := in.breaker().Allow()
				if err != nil {
					return
				}
				admitted.Add(1)
				mu.Lock()
				dones = append(dones, done)
				mu.Unlock()
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 1 {
			t.Fatalf("round %d: 20 concurrent calls over A and B after the cooldown: %d admitted, want 1 trial fleet-wide", round, n)
		}
		dones[0](outcome)
		want := resilience.StateOpen
		if outcome == payrouter.OutcomeSucceeded {
			want = resilience.StateClosed
		}
		waitState(t, a, want, time.Second, "A after a trial "+string(outcome))
		waitState(t, b, want, time.Second, "B after a trial "+string(outcome))
	}
}

func TestFleetForceAndResetAreShared(t *testing.T) {
	srv := redistest.Start(t)
	a, b := startInstance(t, srv.URL(), "A", fleetRules), startInstance(t, srv.URL(), "B", fleetRules)
	if err := a.fleet.Force(t.Context(), a.breaker(), payrouter.ForcedOpen); err != nil {
		t.Fatal(err)
	}
	waitState(t, b, resilience.StateOpen, time.Second, "B after force-open on A")
	if f := b.breaker().Snapshot().Forced; f != payrouter.ForcedOpen {
		t.Errorf("B's forced state after force-open on A: %q", f)
	}
	if err := b.fleet.Force(t.Context(), b.breaker(), payrouter.ForcedNone); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, resilience.StateClosed, time.Second, "A after reset on B")
	if f := a.breaker().Snapshot().Forced; f != payrouter.ForcedNone {
		t.Errorf("A's forced state after reset on B: %q", f)
	}
}

// An instance that starts while a breaker is open fleet-wide starts with it open.
func TestFleetRestartedInstanceComesBackOpen(t *testing.T) {
	srv := redistest.Start(t)
	rules := fleetRules
	rules.Cooldown = time.Minute
	a := startInstance(t, srv.URL(), "A", rules)
	fail(t, a, 3)
	waitState(t, a, resilience.StateOpen, time.Second, "A after 3 failures")
	waitShared(t, srv.URL(), func(s payrouter.SharedBreaker) bool { return s.Open }, "paywell/charge open in Redis")
	c := startInstance(t, srv.URL(), "C", rules)
	if got := c.breaker().State(); got != resilience.StateOpen {
		t.Fatalf("an instance started while paywell/charge is open fleet-wide: state %s, want open", got)
	}
	if until := c.breaker().OpenUntil(); time.Until(until) < 50*time.Second {
		t.Errorf("its cooldown ends in %v, want about the minute left", time.Until(until))
	}
}

// waitShared polls the fleet's state of paywell/charge in Redis until ok.
func waitShared(t *testing.T, url string, ok func(payrouter.SharedBreaker) bool, what string) {
	t.Helper()
	store, err := redisstore.Open(url, redisstore.Options{Prefix: "fleettest:" + t.Name() + ":", Timeout: fleetTestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	deadline := time.Now().Add(time.Second)
	for {
		states, err := store.BreakerStates(t.Context(), []string{"paywell/charge"})
		if err == nil && ok(states["paywell/charge"]) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 1s (last read %+v, %v)", what, states, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// While Redis is away each instance decides alone; when it is back, a breaker one instance
// opened meanwhile is opened fleet-wide.
func TestFleetDecidesLocallyWhileRedisIsAwayAndResyncs(t *testing.T) {
	srv := redistest.Start(t)
	rules := fleetRules
	rules.Cooldown = time.Minute // A's breaker stays open through the outage
	start := func(origin string) (instance, *statestore.Store) {
		rs, err := redisstore.Open(srv.URL(), redisstore.Options{Prefix: "fleettest:" + t.Name() + ":"})
		if err != nil {
			t.Fatal(err)
		}
		d := resilience.NewDomains([]resilience.GatewaySettings{{Name: "paywell", Breaker: rules}}, nil)
		var f *resilience.Fleet
		ss := statestore.New(rs, statestore.Options{
			Unavailable: redisstore.IsUnavailable, CheckDown: 20 * time.Millisecond, CheckUp: 50 * time.Millisecond,
			OnChange: func(up bool) {
				if up {
					f.Resync(context.Background())
				}
			},
		})
		f = resilience.NewFleet(d, ss, resilience.FleetOptions{Origin: origin, Refresh: 100 * time.Millisecond, Up: ss.Up})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { ss.Run(ctx) })
		wg.Go(func() { f.Run(ctx) })
		t.Cleanup(func() { cancel(); wg.Wait(); rs.Close(); d.Close() })
		return instance{d: d, fleet: f}, ss
	}
	a, storeA := start("A")
	b, storeB := start("B")

	srv.Stop()
	for _, s := range []*statestore.Store{storeA, storeB} {
		deadline := time.Now().Add(2 * time.Second)
		for s.Up() {
			if time.Now().After(deadline) {
				t.Fatal("the state store still says up 2s after redis-server stopped")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	fail(t, a, 3)
	if got := a.breaker().State(); got != resilience.StateOpen {
		t.Fatalf("A after 3 failures with Redis away: %s, want open on its own counts", got)
	}
	if done, err := b.breaker().Allow(); err != nil {
		t.Fatalf("B with Redis away cannot know of A's breaker, and must still admit: %v", err)
	} else {
		done(payrouter.OutcomeSucceeded)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	took := waitState(t, b, resilience.StateOpen, 3*time.Second, "B after Redis came back (A's breaker was open)")
	t.Logf("B opened %v after Redis came back", took)
	if got := a.breaker().State(); got != resilience.StateOpen {
		t.Errorf("A after the re-sync: %s, want still open", got)
	}
}

// Regression: a reset right after a trip was sometimes undone by that trip's own open (or its
// failures), sent to Redis after the reset, which reopened the breaker fleet-wide for a cooldown.
func TestFleetResetRightAfterTripStaysReset(t *testing.T) {
	srv := redistest.Start(t)
	rules := fleetRules
	rules.Cooldown = time.Minute
	a, b := startInstance(t, srv.URL(), "A", rules), startInstance(t, srv.URL(), "B", rules)
	for round := range 20 {
		fail(t, a, 3)
		if err := a.fleet.Force(t.Context(), a.breaker(), payrouter.ForcedNone); err != nil {
			t.Fatalf("round %d: reset: %v", round, err)
		}
		waitShared(t, srv.URL(), func(s payrouter.SharedBreaker) bool { return !s.Open && !s.HalfOpen }, "paywell/charge closed in Redis after the reset")
		waitState(t, b, resilience.StateClosed, time.Second, "B after the reset on A")
		if got := a.breaker().State(); got != resilience.StateClosed {
			t.Fatalf("round %d: A after its own reset: %s, want closed", round, got)
		}
	}
}
