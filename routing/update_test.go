package routing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/resilience"
)

// reload applies a configuration of gateways (each as newFixture makes them) and routes to f, as
// a reload does: the domains first, then the router.
func (f *fixture) reload(t *testing.T, gateways []string, routes []Route) {
	t.Helper()
	var settings []resilience.GatewaySettings
	adapters := map[string]payrouter.Gateway{}
	for name, gw := range f.gw {
		adapters[name] = gw // retired gateways keep their adapter
	}
	for _, n := range gateways {
		settings = append(settings, resilience.GatewaySettings{Name: n, Timeout: time.Second, MaxConcurrent: 4,
			Breaker: resilience.BreakerSettings{ConsecutiveFailures: 100, Cooldown: time.Minute}})
		if f.gw[n] == nil {
			f.gw[n] = &scripted{authorize: approved, status: notFound}
			adapters[n] = f.gw[n]
		}
	}
	if _, err := f.dom.Update(settings); err != nil {
		t.Fatal(err)
	}
	if err := f.router.Update(routes, adapters, fallback.Queue, fallback.Degrade); err != nil {
		t.Fatal(err)
	}
}

// After a reload that takes ding out of the route and adds a new gateway, new charges follow the
// new route; a pin to the removed gateway is refused, while a charge it holds can still be
// captured there.
func TestUpdateRoutesAndRetiredGateways(t *testing.T) {
	f := newFixture(t, Route{Name: "default", Gateways: []string{"ding", "paywell"}})
	f.gw["ding"].authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized, GatewayReference: "gw_ding"}
	held := newCharge()
	held.Capture = false
	if _, err := charge(context.Background(), f.router, held); err != nil || held.Gateway != "ding" {
		t.Fatalf("before the reload: %v at %q", err, held.Gateway)
	}
	if err := f.store.SaveCharge(context.Background(), held); err != nil {
		t.Fatal(err)
	}

	f.reload(t, []string{"paywell", "tranglo", "adyen"}, []Route{{Name: "default", Gateways: []string{"adyen", "paywell"}}})
	if _, got, err := f.router.Candidates(newCharge()); err != nil || !equal(got, []string{"adyen", "paywell"}) {
		t.Fatalf("candidates after the reload: %v %v", got, err)
	}
	c := newCharge()
	c.ID = "ch_after"
	if _, err := charge(context.Background(), f.router, c); err != nil || c.Gateway != "adyen" {
		t.Errorf("a charge after the reload: %v at %q, want the new gateway", err, c.Gateway)
	}
	pinned := newCharge()
	pinned.PinnedGateway = "ding"
	var perr *payrouter.Error
	if _, _, err := f.router.Candidates(pinned); !errors.As(err, &perr) || perr.Code != payrouter.EInvalid {
		t.Errorf("a pin to the removed ding: %v, want invalid", err)
	}
	f.gw["ding"].authorize = approved
	got, err := f.router.Capture(context.Background(), held.ID)
	if err != nil || got.Status != payrouter.StatusSucceeded {
		t.Errorf("capturing the charge the removed ding holds: %v, %v", err, got)
	}

	if err := f.router.Update([]Route{{Name: "default", Gateways: []string{"ding"}}}, map[string]payrouter.Gateway{"ding": f.gw["ding"]}, "", ""); err == nil {
		t.Error("a route to a removed gateway was taken")
	}
}

// A charge under way when the configuration changes finishes on the routes and domains it
// started with: its failover still reaches the gateway the reload took out of the route.
func TestChargeUnderWayFinishesOnItsConfiguration(t *testing.T) {
	f := newFixture(t, Route{Name: "default", Gateways: []string{"paywell", "ding"}})
	started, release := make(chan struct{}), make(chan struct{})
	f.gw["paywell"].authorize = unavailable
	f.gw["paywell"].onCall = func() { close(started); <-release }
	done := make(chan error)
	c := newCharge()
	go func() {
		_, err := charge(context.Background(), f.router, c)
		done <- err
	}()
	<-started
	f.reload(t, []string{"paywell", "tranglo"}, []Route{{Name: "default", Gateways: []string{"paywell", "tranglo"}}})
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := attempts(c); !equal(got, []string{"paywell/unavailable", "ding/succeeded"}) || c.Status != payrouter.StatusSucceeded {
		t.Errorf("attempts %v status %s, want the failover of the route it started on", got, c.Status)
	}
	if n := len(f.gw["tranglo"].calls); n != 0 {
		t.Errorf("tranglo was called %d times by a charge that started before it was routed to", n)
	}
}

// Hedge budgets and what attempts taught of a gateway carry over a reload; fallbacks change.
func TestUpdateCarriesOverLearningAndChangesFallbacks(t *testing.T) {
	hedged := Route{Name: "pair", Gateways: []string{"paywell", "ding"}, Hedge: &Hedge{After: time.Second, Budget: 0.5}}
	f := newFixture(t, hedged)
	before := f.router.table()
	f.reload(t, []string{"paywell", "ding", "tranglo"}, []Route{hedged})
	after := f.router.table()
	if after.stats["paywell"] != before.stats["paywell"] || after.hedgeBudgets["pair"] != before.hedgeBudgets["pair"] {
		t.Error("a reload that keeps paywell and the pair route lost what they had learnt")
	}
	if after.stats["tranglo"] == nil {
		t.Error("the new gateway has no stats")
	}
	if err := f.router.Update([]Route{hedged}, after.gateways, fallback.Fail, fallback.Fail); err != nil {
		t.Fatal(err)
	}
	if tab := f.router.table(); tab.refundFallback != fallback.Fail || tab.statusFallback != fallback.Fail {
		t.Errorf("fallbacks after the update: %s %s", tab.refundFallback, tab.statusFallback)
	}
}
