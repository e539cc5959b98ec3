package routing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/resilience"
)

// Router runs charges through their route's gateways. It writes no money state itself: what a
// charge's attempts change (the charge stored before each call, an attempt no charge keeps
// queued for release, how a late attempt ended) is its Keeper's to write.
type Router struct {
	// tab is the configuration in use: routes, adapters and domains; Update swaps it.
	tab     atomic.Pointer[table]
	domains *resilience.Domains
	budget  time.Duration
	log     *slog.Logger
	now     func() time.Time
	rnd     func(n int) int
	obs     Observer
	// late counts the attempts left running in the background when their charge answered.
	late sync.WaitGroup
}

// Keeper writes what a charge's attempts change of money state: the owner of the charge's life
// (payments.Service) implements it, and routing calls nothing else of it.
type Keeper interface {
	// SaveCharge stores c, processing, before a call to the gateway and reference it names:
	// should this process die mid-call, the reconciler knows where to look. An error sends
	// nothing (payrouter.ErrStale: the charge was resolved meanwhile by another writer).
	SaveCharge(ctx context.Context, c *payrouter.Charge) error
	// ReleaseLater queues the release of an attempt no charge keeps (payrouter.TaskVoid,
	// TaskRecheck), started no sooner than after.
	ReleaseLater(ctx context.Context, kind payrouter.TaskKind, c *payrouter.Charge, gateway, ref, gwRef string, after time.Duration)
	// NoteLateAnswer writes into the stored charge how its attempt sent with reference ref,
	// which answered after the charge was decided, ended: at's outcome, duration and voided,
	// and its reference, empty when the gateway was never called (nothing can be held there).
	NoteLateAnswer(ctx context.Context, chargeID, ref string, at payrouter.Attempt) error
	// QueueCapture queues the capture of c's authorization (gateway, ref, gwRef), the one c
	// keeps (payrouter.TaskCapture), durably, before c is answered succeeded with its capture
	// queued; it is made only once c's sale (payrouter.Attempt.Sale), if any, holds nothing.
	// awaitSale: the sale is still running, and SaleAnswered brings its answer. An error
	// queued nothing.
	QueueCapture(ctx context.Context, c *payrouter.Charge, gateway, ref, gwRef string, awaitSale bool) error
	// SaleAnswered hands over the answer of the sale of charge chargeID that was still running
	// when a hedge won it (QueueCapture with awaitSale): the queued capture settles from it.
	SaleAnswered(chargeID string, res payrouter.Result)
}

// Observer is told what the router decided beyond single gateway calls (the resilience Observer
// sees those): hedges. telemetry implements it.
type Observer interface {
	// HedgeDone: a hedged charge ended; result is won_primary, won_hedge or voided (once per
	// voided approval).
	HedgeDone(result string)
}

// nopObserver is the Observer when Config gives none.
type nopObserver struct{}

func (nopObserver) HedgeDone(string) {}

// Config is what a Router needs.
type Config struct {
	Routes   []Route
	Gateways map[string]payrouter.Gateway // adapters by configured name
	Domains  *resilience.Domains          // breakers, bulkheads and timeouts by gateway
	// Budget is request_timeout: one charge, failover and status look-ups included, never takes
	// longer.
	Budget time.Duration
	Log    *slog.Logger
	// Fallbacks are the policies of `fallbacks:` (fallback.Settings; the zero value is every
	// default): what a charge answers when no gateway can take it.
	Fallbacks fallback.Settings
	// Observer is told about hedges; nil: nobody.
	Observer Observer
}

// New returns a Router. Every gateway named by a route must be in Gateways and Domains.
func New(cfg Config) (*Router, error) {
	if err := checkRoutes(cfg.Routes, cfg.Gateways, cfg.Domains.Current()); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Router{
		domains: cfg.Domains,
		budget:  cfg.Budget, log: log, now: time.Now, rnd: randIntN, obs: cfg.Observer,
	}
	if r.obs == nil {
		r.obs = nopObserver{}
	}
	tab := newTable(nil, cfg.Routes, cfg.Gateways, cfg.Domains.Current())
	tab.fallbacks = r.fallbacks(cfg.Fallbacks)
	r.tab.Store(tab)
	return r, nil
}

// fallbacks decides, under the policies of settings, what a charge no gateway took answers.
func (r *Router) fallbacks(settings fallback.Settings) fallback.Fallbacks {
	return fallback.Fallbacks{Settings: settings.WithDefaults(), Now: func() time.Time { return r.now() }}
}

// table is what a reload changes in a Router: the routes, the adapters (of retired gateways
// too, for the charges they hold) and the failure domains they run under. A charge runs on the
// table it started with, handed to every step explicitly (chargeRun.tab); what recent attempts
// tell of each gateway (hedge delays, success_rate) and each hedged route's token bucket carry
// over to the next table by name.
type table struct {
	routes []Route
	// index finds the first route matching a charge among routes (index.go).
	index *routeIndex
	// gw is the adapters and the failure domains every gateway call of a charge goes through.
	gw *Gateways
	// fallbacks answers a charge no gateway took. Its use is counted by the API, which answers
	// it (fallback.Fallbacks.Charge).
	fallbacks fallback.Fallbacks
	// stats is what recent charge attempts tell of each gateway; hedgeBudgets the hedge token
	// bucket of each hedged route, by name. hedge.go, strategy.go.
	stats        map[string]*gatewayStats
	hedgeBudgets map[string]*hedgeBudget
}

// table returns the table in use now.
func (r *Router) table() *table { return r.tab.Load() }

// checkRoutes refuses a route naming a gateway that has no adapter or is not live in set.
func checkRoutes(routes []Route, gateways map[string]payrouter.Gateway, set *resilience.DomainSet) error {
	for _, r := range routes {
		for _, g := range r.order(func(int) int { return 0 }) {
			if gateways[g] == nil || !set.Live(g) {
				return fmt.Errorf("route %s: gateway %q is not configured", r.Name, g)
			}
		}
	}
	return nil
}

// Update makes routes, gateways (the adapters by name, those of retired gateways included) and
// the fallbacks (as in Config) the router's, over the domains' current set: call it after the
// Domains' Update, and give Gateways to what follows the charges' first answers. Charges under
// way finish on the routes and domains they started with.
func (r *Router) Update(routes []Route, gateways map[string]payrouter.Gateway, fallbacks fallback.Settings) error {
	set := r.domains.Current()
	if err := checkRoutes(routes, gateways, set); err != nil {
		return err
	}
	tab := newTable(r.table(), routes, gateways, set)
	tab.fallbacks = r.fallbacks(fallbacks)
	r.tab.Store(tab)
	return nil
}

// Gateways returns the adapters and failure domains of the configuration in use, for what
// follows a charge's first answer (payments.Service.Update): the same the router calls.
func (r *Router) Gateways() *Gateways { return r.table().gw }

// Candidates returns the route name and the gateways a charge will be tried at, in order. A
// pinned gateway is the only candidate.
func (r *Router) Candidates(c *payrouter.Charge) (route string, gateways []string, err error) {
	rt, gateways, err := r.candidates(r.table(), c)
	if rt != nil {
		route = rt.Name
	}
	return route, gateways, err
}

// candidates is Candidates on tab, returning the route matched (nil for a pinned gateway).
func (r *Router) candidates(tab *table, c *payrouter.Charge) (route *Route, gateways []string, err error) {
	if c.PinnedGateway != "" {
		if tab.gw.Adapters[c.PinnedGateway] == nil || !tab.gw.Domains.Live(c.PinnedGateway) {
			return nil, nil, payrouter.Errorf(payrouter.EInvalid, "gateway %q is not configured", c.PinnedGateway)
		}
		return nil, []string{c.PinnedGateway}, nil
	}
	if i := tab.index.first(tab.routes, c.Amount, c.Currency, c.Country); i >= 0 {
		return &tab.routes[i], r.orderOf(tab, tab.routes[i]), nil
	}
	return nil, nil, payrouter.Errorf(payrouter.EInvalid, "no route matches a %s charge of %d", c.Currency, c.Amount)
}

// Plan is a new charge's way through the router, chosen before anything is stored or sent
// (Router.Plan): the table it runs on, its route and its candidate gateways in order.
type Plan struct {
	tab        *table
	route      *Route // nil for a pinned gateway
	candidates []string
	// Stored says that the caller has stored the charge as Plan left it (processing, naming
	// the first candidate and its reference), in the write that claimed its idempotency key
	// (payrouter.Store.ClaimCharge): the first gateway call is then made without a save of
	// its own. false: Run stores the charge before its first call, as before every call.
	Stored bool
}

// Plan chooses c's route and candidates on the configuration in use, and sets c as it is to be
// stored before its first gateway call: processing, on its route, created now, naming the first
// candidate and the reference of its next attempt. Nothing is stored or sent: Run does the rest.
// It fails as Route does when no route matches or the pinned gateway is not configured.
func (r *Router) Plan(c *payrouter.Charge) (*Plan, error) {
	tab := r.table()
	rt, candidates, err := r.candidates(tab, c)
	if err != nil {
		return nil, err
	}
	c.Route = ""
	if rt != nil {
		c.Route = rt.Name
	}
	c.Status = payrouter.StatusProcessing
	c.CreatedAt = r.now().UTC()
	c.UpdatedAt = c.CreatedAt
	if len(candidates) > 0 {
		c.Gateway, c.Reference = candidates[0], payrouter.AttemptReference(c.ID, len(c.Attempts)+1)
	}
	return &Plan{tab: tab, route: rt, candidates: candidates}, nil
}

// Route runs a new charge's attempts (Plan, then Run): tried at each candidate gateway under the
// failover rules, stored by keep as processing just before each gateway call (so that a crash
// mid-call leaves it for reconciliation). Its final state is the caller's to store (FinalState
// says which charge), with the answer to its idempotency key in one step
// (payrouter.Store.CompleteCharge): one write per charge less. A charge no gateway was called
// for is never stored: during an outage the fast 503 path writes nothing. It returns the charge,
// or a *fallback.Unavailable when no gateway could take it, or payrouter.ErrStale when another
// writer resolved the charge before a failover's next call (nothing more was sent). The budget
// runs from the call, and a caller that goes away does not cancel gateway calls under way: a
// charge cut off mid-call would become an unknown outcome.
func (r *Router) Route(ctx context.Context, c *payrouter.Charge, keep Keeper) (*payrouter.Charge, error) {
	plan, err := r.Plan(c)
	if err != nil {
		return nil, err
	}
	return r.Run(ctx, plan, c, keep)
}

// Run runs the attempts of c, set by Plan, as Route describes. When plan.Stored, c is in the
// store as Plan left it: its first call needs no save, and should no gateway be called at all
// its final state (failed) is still the caller's to store (FinalState), since the charge exists.
func (r *Router) Run(ctx context.Context, plan *Plan, c *payrouter.Charge, keep Keeper) (*payrouter.Charge, error) {
	tab := plan.tab
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.budget)
	defer cancel()

	run := chargeRun{r: r, tab: tab, c: c, keep: keep, stored: plan.Stored}
	if rt := plan.route; rt != nil && rt.Hedge != nil {
		// The matched route's own policy and bucket: looking them up by name would read every
		// route again (a pinned charge, with no route, is never hedged).
		run.hedge, run.hedgeBudget = rt.Hedge, tab.hedgeBudgets[rt.Name]
	}
	unavailable := run.attempt(ctx, plan.candidates)
	if run.storeErr != nil {
		// Nothing was sent: with the database away this is 503 state-unavailable, with the
		// hold lost to a later request (payrouter.ErrHoldLost) that request answers.
		return nil, fmt.Errorf("storing charge %s before a gateway call: %w", c.ID, run.storeErr)
	}
	if run.stored {
		c.UpdatedAt = r.now().UTC()
	}
	if unavailable {
		m := fallback.Missed{Attempts: c.Attempts, OpenUntil: tab.gw.OpenUntil(payrouter.OpCharge)}
		if run.stored {
			m.ChargeID = c.ID // its final state is stored (FinalState)
		}
		return c, tab.fallbacks.Charge(m)
	}
	return c, nil
}

// FinalState returns the charge whose final state the caller of Route must store, given what
// Route returned: the charge when a gateway was called for it (a nil error, or an Unavailable
// with a ChargeID), nil when nothing is to be stored.
func FinalState(c *payrouter.Charge, err error) *payrouter.Charge {
	var u *fallback.Unavailable
	if c != nil && (err == nil || errors.As(err, &u) && u.ChargeID != "") {
		return c
	}
	return nil
}

// FastFail answers a charge that no gateway can take now, every candidate's charge breaker being
// open (tripped within its cooldown, or forced), the way Route would (every attempt
// breaker_open, counted as Route counts them), but without storing anything: ok is false, and
// nothing counted, when any candidate would admit a call, and then Route decides. It lets an
// outage at the gateways cost the database no write: the caller only looks the key up
// (payrouter.IdempotencyStore.Peek), so that a key answered before still replays.
func (r *Router) FastFail(ctx context.Context, c *payrouter.Charge) (*fallback.Unavailable, bool) {
	tab := r.table()
	_, candidates, err := r.candidates(tab, c)
	if err != nil || len(candidates) == 0 {
		return nil, false
	}
	for _, name := range candidates {
		if g := tab.gw.Domains.Guard(name, payrouter.OpCharge); g == nil || g.Breaker().State() != resilience.StateOpen {
			return nil, false
		}
	}
	attempts := make([]payrouter.Attempt, 0, len(candidates))
	for i, name := range candidates {
		// Through the guard, so that the refusal is counted and traced as Route's would be;
		// should the breaker have turned half-open since, the call it admits sends nothing
		// (excluded from its counts, its trial handed back) and Route decides instead.
		call := tab.gw.Call(name, payrouter.OpCharge, "", nil)
		call.Attempt, call.Before = i+1, func(context.Context) bool { return false }
		res := call.Do(ctx)
		if res.Outcome != payrouter.OutcomeBreakerOpen {
			return nil, false
		}
		attempts = append(attempts, res.Attempt())
	}
	return tab.fallbacks.Charge(fallback.Missed{Attempts: attempts, OpenUntil: tab.gw.OpenUntil(payrouter.OpCharge)}), true
}

// chargeRun is one charge on its way through its candidate gateways. Every gateway call it makes
// goes through tab, the table it started with: a reload under way changes none of its routes,
// adapters or domains (guards, timeouts, breakers).
type chargeRun struct {
	r        *Router
	tab      *table
	c        *payrouter.Charge
	keep     Keeper // writes what the attempts change
	stored   bool   // the charge is in the store: a gateway was about to be called
	storeErr error  // storing it failed, so no gateway was called
	// hedge is the route's hedging policy, nil for none; hedgeBudget its token bucket.
	hedge       *Hedge
	hedgeBudget *hedgeBudget
}

// storeBeforeCall stores the charge as processing, naming the gateway and reference about to be
// called, before each call: should this process die mid-call, the reconciler knows where to
// look. A failover is the only path with a second save.
func (run *chargeRun) storeBeforeCall(ctx context.Context, gateway, ref string) bool {
	c := run.c
	if run.stored && c.Gateway == gateway && c.Reference == ref {
		return true
	}
	c.Gateway, c.Reference = gateway, ref
	if err := run.keep.SaveCharge(ctx, c); err != nil {
		run.storeErr = err
		return false
	}
	run.stored = true
	return true
}

// attempt tries the candidates in order and leaves the charge's status set. It reports true when
// no gateway took the charge and none may have: the charge's fallback answers.
func (run *chargeRun) attempt(ctx context.Context, candidates []string) (unavailable bool) {
	if run.hedge != nil && run.hedgeBudget != nil {
		var done bool
		if candidates, done = run.hedged(ctx, run.hedge, run.hedgeBudget, candidates); done {
			return false
		}
	}
	c := run.c
	for _, name := range candidates {
		gw := run.tab.gw.Adapters[name]
		ref := payrouter.AttemptReference(c.ID, len(c.Attempts)+1)
		req := authorization(c, ref, c.Capture)
		call := run.tab.gw.Call(name, payrouter.OpCharge, ref, func(ctx context.Context) payrouter.Result { return gw.Authorize(ctx, req) })
		call.Attempt = len(c.Attempts) + 1
		call.Before = func(ctx context.Context) bool { return run.storeBeforeCall(ctx, name, ref) }
		answer := call.Do(ctx)
		if run.storeErr != nil {
			return false
		}
		run.tab.recordAttempt(run.r.now(), answer)
		if answer.Called && answer.Outcome != payrouter.OutcomeSucceeded {
			// Refusals without a call are counted by the metrics, not logged one by one: an
			// outage at full traffic must not flood the logs.
			run.r.log.InfoContext(ctx, "charge.attempt", "charge_id", c.ID, "gateway", name, "outcome", answer.Outcome,
				"duration_ms", answer.Duration.Milliseconds(), "detail", answer.Detail)
		}
		c.Attempts = append(c.Attempts, answer.Attempt())

		res := answer.Result
		if res.Outcome.MayHaveProcessed() {
			res = run.resolve(ctx, c, gw, name, ref)
			c.Attempts[len(c.Attempts)-1].Resolved = res.State
			if res.State == payrouter.TxNotFound {
				// The gateway never had it: safe to try the next one. A gateway may still
				// process a request it got late, so the attempt is looked up again later and
				// an approval found then is voided.
				run.keep.ReleaseLater(ctx, payrouter.TaskRecheck, c, name, ref, "", run.tab.gw.Timeout(name, payrouter.OpCharge))
				continue
			}
		}
		if res.Outcome.NotSent() {
			continue
		}
		Apply(c, name, ref, res)
		return false
	}
	// No gateway took it: the charge names none (storeBeforeCall named the last one called).
	c.Status, c.Gateway, c.Reference, c.GatewayReference = payrouter.StatusFailed, "", "", ""
	return true
}

// authorization is the request that authorizes c with reference ref, capturing it too when
// capture is set.
func authorization(c *payrouter.Charge, ref string, capture bool) payrouter.ChargeRequest {
	return payrouter.ChargeRequest{
		Reference: ref, Amount: c.Amount, Currency: c.Currency, Token: c.PaymentMethod.Token,
		Capture: capture, Country: c.Country, CustomerID: c.CustomerID, Description: c.Description,
	}
}

// resolve asks the gateway that may have processed a charge what became of it, within the budget,
// through the status guard of the charge's table. A look-up that fails leaves the outcome
// unknown: the charge stays processing for the reconciler, and nothing goes to another gateway.
func (run *chargeRun) resolve(ctx context.Context, c *payrouter.Charge, gw payrouter.Gateway, name, ref string) payrouter.Result {
	r := run.r
	req := payrouter.TxRequest{Reference: ref, ChargeReference: ref, Amount: c.Amount, Currency: c.Currency}
	res := run.tab.gw.Call(name, payrouter.OpStatus, ref, func(ctx context.Context) payrouter.Result { return gw.Status(ctx, req) }).Do(ctx)
	if res.Outcome != payrouter.OutcomeSucceeded {
		r.log.WarnContext(ctx, "charge.unresolved", "charge_id", c.ID, "gateway", name, "lookup_outcome", res.Outcome, "detail", res.Detail)
		return payrouter.Result{Outcome: payrouter.OutcomeUnknown, Detail: "status look-up failed: " + res.Detail}
	}
	r.log.InfoContext(ctx, "charge.resolved", "charge_id", c.ID, "gateway", name, "state", res.State)
	return OutcomeOfState(res.Result)
}

// Wait returns once every attempt left running when its charge answered (a hedge's flights) has
// ended and been dealt with: a late approval voided, or its void queued. Call it after the last
// charge has answered and before the stores close; a service that stops without it could leave
// an approval held on a card with nothing queued to release it.
func (r *Router) Wait() { r.late.Wait() }
