package routing

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
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
		settings = append(settings, resilience.GatewaySettings{Name: n, TimeoutSettings: resilience.TimeoutSettings{Timeout: time.Second}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 100, Cooldown: time.Minute}}})
		if f.gw[n] == nil {
			f.gw[n] = &scripted{authorize: approved, status: notFound}
			adapters[n] = f.gw[n]
		}
	}
	if _, err := f.dom.Update(settings); err != nil {
		t.Fatal(err)
	}
	if err := f.router.Update(routes, adapters, fallback.Settings{}); err != nil {
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
	if _, err := charge(context.Background(), f.router, f.keep, held); err != nil || held.Gateway != "ding" {
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
	if _, err := charge(context.Background(), f.router, f.keep, c); err != nil || c.Gateway != "adyen" {
		t.Errorf("a charge after the reload: %v at %q, want the new gateway", err, c.Gateway)
	}
	pinned := newCharge()
	pinned.PinnedGateway = "ding"
	var perr *payrouter.Error
	if _, _, err := f.router.Candidates(pinned); !errors.As(err, &perr) || perr.Code != payrouter.EInvalid {
		t.Errorf("a pin to the removed ding: %v, want invalid", err)
	}
	// What follows the charges' first answers (settle: captures, refunds, tasks) goes through
	// the router's gateways, which still reach the removed ding that holds one.
	if !f.router.Gateways().Has("ding") {
		t.Error("after the reload the gateways cannot reach the removed ding, which holds an authorization")
	}

	if err := f.router.Update([]Route{{Name: "default", Gateways: []string{"ding"}}}, map[string]payrouter.Gateway{"ding": f.gw["ding"]}, fallback.Settings{}); err == nil {
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
		_, err := charge(context.Background(), f.router, f.keep, c)
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
	hedged := Route{Name: "pair", Gateways: []string{"paywell", "ding"}, Hedge: &Hedge{After: HedgeAfter{Delay: time.Second}, Budget: 0.5}}
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
	if err := f.router.Update([]Route{hedged}, after.gw.Adapters, fallback.Settings{Refund: fallback.Fail, Status: fallback.Fail}); err != nil {
		t.Fatal(err)
	}
	want := fallback.Settings{Charge: fallback.Fail, Refund: fallback.Fail, Status: fallback.Fail}
	if got := f.router.table().fallbacks.Settings; got != want {
		t.Errorf("fallbacks after the update: %+v, want %+v", got, want)
	}
}

// slowFollowUps is a gateway whose status look-ups and captures take delay (or end with the
// call's deadline, as a gateway that has not answered yet): what a charge's own follow-up
// calls are bounded by is then the timeout of the domains they go through.
type slowFollowUps struct {
	*scripted
	delay time.Duration
}

func (g slowFollowUps) wait(ctx context.Context, then func() payrouter.Result) payrouter.Result {
	select {
	case <-time.After(g.delay):
		return then()
	case <-ctx.Done():
		return payrouter.Result{Outcome: payrouter.OutcomeTimeout, Detail: "no answer before the deadline"}
	}
}

func (g slowFollowUps) Status(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return g.wait(ctx, func() payrouter.Result { return g.scripted.Status(ctx, req) })
}

func (g slowFollowUps) Capture(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	return g.wait(ctx, func() payrouter.Result { return g.scripted.Capture(ctx, req) })
}

// A reload in the middle of a charge does not switch the domains its calls go through: the
// status look-up after a timeout keeps the timeout
// of the configuration the charge started on (1s, enough for the gateway's 300ms), not the
// 100ms the reload gives paywell, which would leave the charge processing.
func TestReloadMidChargeKeepsItsDomains(t *testing.T) {
	cases := []struct {
		name  string
		route Route
		// authorize is paywell's answer to the charge's first call.
		authorize payrouter.Result
	}{
		{"status look-up after a timeout", Route{Name: "default", Gateways: []string{"paywell", "ding"}}, timedOut},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t, tc.route)
				paywell := f.gw["paywell"]
				paywell.authorize, paywell.status = tc.authorize, foundIt
				slow := slowFollowUps{scripted: paywell, delay: 300 * time.Millisecond}
				adapters := map[string]payrouter.Gateway{"paywell": slow, "ding": f.gw["ding"], "tranglo": f.gw["tranglo"]}
				if err := f.router.Update([]Route{tc.route}, adapters, fallback.Settings{}); err != nil {
					t.Fatal(err)
				}
				inCall, reloaded := make(chan struct{}), make(chan struct{})
				var once sync.Once
				paywell.onCall = func() { once.Do(func() { close(inCall); <-reloaded }) }

				done := make(chan error)
				c := newCharge()
				go func() {
					_, err := charge(context.Background(), f.router, f.keep, c)
					done <- err
				}()
				<-inCall // paywell has the charge's first call
				settings := []resilience.GatewaySettings{}
				for _, n := range []string{"paywell", "ding", "tranglo"} {
					timeout := time.Second
					if n == "paywell" {
						timeout = 100 * time.Millisecond
					}
					settings = append(settings, resilience.GatewaySettings{Name: n, TimeoutSettings: resilience.TimeoutSettings{Timeout: timeout}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 100, Cooldown: time.Minute}}})
				}
				if _, err := f.dom.Update(settings); err != nil {
					t.Fatal(err)
				}
				if err := f.router.Update([]Route{tc.route}, adapters, fallback.Settings{}); err != nil {
					t.Fatal(err)
				}
				close(reloaded)
				if err := <-done; err != nil {
					t.Fatal(err)
				}
				if c.Status != payrouter.StatusSucceeded || c.Gateway != "paywell" {
					t.Errorf("charge %s at %q, want succeeded at paywell: its follow-up ran under the reloaded timeout", c.Status, c.Gateway)
				}
				stored, err := f.store.Charge(context.Background(), c.ID)
				if err != nil || stored.Status != payrouter.StatusSucceeded {
					t.Errorf("stored charge: %v, %v; want succeeded", stored, err)
				}
			})
		})
	}
}
