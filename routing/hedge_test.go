package routing

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/resilience"
)

// ledgerGateway is an in-process gateway with a ledger, like the simulators': an approved
// authorization is in the ledger from the moment the request arrives, however long the answer
// takes, so a slow approval is money held whether or not anyone waits for it. Time is the
// bubble's (testing/synctest): delays cost nothing, and hold lets a test decide when a slow
// answer comes.
type ledgerGateway struct {
	mu           sync.Mutex
	decline      bool          // decline every authorization
	delay        time.Duration // before an authorization is answered
	hold         chan struct{} // when set, authorizations are answered once it is closed
	answer       payrouter.Outcome
	captureFails bool
	captureDelay time.Duration // before a capture is answered
	voidFails    bool
	statusFails  bool
	ledger       map[string]payrouter.TxState // by the reference the charge was sent with
	calls        []string
}

func newLedgerGateway() *ledgerGateway {
	return &ledgerGateway{ledger: map[string]payrouter.TxState{}}
}

func (g *ledgerGateway) call(format string, args ...any) {
	g.mu.Lock()
	g.calls = append(g.calls, fmt.Sprintf(format, args...))
	g.mu.Unlock()
}

func (g *ledgerGateway) Authorize(ctx context.Context, req payrouter.ChargeRequest) payrouter.Result {
	g.call("authorize %s capture=%v", req.Reference, req.Capture)
	g.mu.Lock()
	decline, delay, hold, answer := g.decline, g.delay, g.hold, g.answer
	state := payrouter.TxAuthorized
	if req.Capture {
		state = payrouter.TxCaptured
	}
	if decline {
		state = payrouter.TxDeclined
	}
	if answer == "" || answer == payrouter.OutcomeTimeout {
		g.ledger[req.Reference] = state
	}
	g.mu.Unlock()

	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return payrouter.Result{Outcome: payrouter.OutcomeTimeout}
		}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return payrouter.Result{Outcome: payrouter.OutcomeTimeout}
		}
	}
	switch {
	case answer != "":
		return payrouter.Result{Outcome: answer}
	case decline:
		return payrouter.Result{Outcome: payrouter.OutcomeDeclined, DeclineCode: "do_not_honor"}
	}
	return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: state, GatewayReference: "gw-" + req.Reference}
}

func (g *ledgerGateway) Capture(ctx context.Context, req payrouter.TxRequest) payrouter.Result {
	g.call("capture %s as %s", req.ChargeReference, req.Reference)
	g.mu.Lock()
	delay := g.captureDelay
	g.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return payrouter.Result{Outcome: payrouter.OutcomeTimeout}
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.captureFails || g.ledger[req.ChargeReference] != payrouter.TxAuthorized {
		return payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
	}
	g.ledger[req.ChargeReference] = payrouter.TxCaptured
	return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured}
}

func (g *ledgerGateway) Void(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	g.call("void %s as %s", req.ChargeReference, req.Reference)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.voidFails || g.ledger[req.ChargeReference] != payrouter.TxAuthorized {
		return payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
	}
	g.ledger[req.ChargeReference] = payrouter.TxVoided
	return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxVoided}
}

func (g *ledgerGateway) Refund(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	g.call("refund %s", req.ChargeReference)
	return payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
}

func (g *ledgerGateway) Status(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	g.call("status %s", req.Reference)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.statusFails {
		return payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
	}
	st, ok := g.ledger[req.Reference]
	if !ok {
		st = payrouter.TxNotFound
	}
	return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: st}
}

func (g *ledgerGateway) Health(context.Context) error { return nil }

// money is the gateway's ledger, by reference.
func (g *ledgerGateway) money() map[string]payrouter.TxState {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.ledger)
}

// callsLike are the calls whose text starts with prefix.
func (g *ledgerGateway) callsLike(prefix string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, c := range g.calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}

// hedgeCounter is the Observer of the tests: it counts hedge results.
type hedgeCounter struct {
	mu      sync.Mutex
	results []string
}

func (o *hedgeCounter) HedgeDone(result string) {
	o.mu.Lock()
	o.results = append(o.results, result)
	o.mu.Unlock()
}

func (o *hedgeCounter) got() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.results)
}

type hedgeFixture struct {
	router *Router
	store  *memstore.Store
	keep   *storeKeeper
	gw     map[string]*ledgerGateway
	dom    *resilience.Domains
	obs    *hedgeCounter
}

// hedgeRoute is the route of most tests: paywell first, ding as its hedge after 100ms, a hedge
// for every charge (budget 1), tranglo last.
var hedgeRoute = Route{Name: "hedged", Gateways: []string{"paywell", "ding", "tranglo"}, Hedge: &Hedge{After: HedgeAfter{Delay: 100 * time.Millisecond}, Budget: 1}}

// newHedgeFixture must be called inside a synctest bubble. Every gateway's timeout is 1s, the
// budget 2s; the store is also the queue.
func newHedgeFixture(t *testing.T, routes ...Route) *hedgeFixture {
	t.Helper()
	names := []string{"paywell", "ding", "tranglo"}
	f := &hedgeFixture{store: memstore.New(), gw: map[string]*ledgerGateway{}, obs: &hedgeCounter{}}
	f.keep = &storeKeeper{charges: f.store, queue: f.store}
	var settings []resilience.GatewaySettings
	adapters := map[string]payrouter.Gateway{}
	for _, n := range names {
		settings = append(settings, resilience.GatewaySettings{Name: n, TimeoutSettings: resilience.TimeoutSettings{Timeout: time.Second}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 100, Cooldown: time.Minute}}})
		f.gw[n] = newLedgerGateway()
		adapters[n] = f.gw[n]
	}
	f.dom = resilience.NewDomains(settings, nil)
	t.Cleanup(f.dom.Close)
	if len(routes) == 0 {
		routes = []Route{hedgeRoute}
	}
	var err error
	f.router, err = New(Config{Routes: routes, Gateways: adapters, Domains: f.dom, Budget: 2 * time.Second, Observer: f.obs})
	if err != nil {
		t.Fatal(err)
	}
	// The attempts a charge left running end (in the bubble's time) before the test does.
	t.Cleanup(f.router.late.Wait)
	return f
}

func chargeNamed(id string) *payrouter.Charge {
	c := newCharge()
	c.ID = id
	return c
}

// tasks lists the queued tasks as "kind gateway reference".
func (f *hedgeFixture) tasks(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, task := range f.store.Tasks() {
		out = append(out, string(task.Kind)+" "+task.Gateway+" "+task.Reference)
	}
	slices.Sort(out)
	return out
}

// captured counts the captured transactions over every gateway, and the authorizations whose
// capture is queued (TaskCapture: payments sends it after the answer, tested there): a charge's
// money is taken once.
func (f *hedgeFixture) captured() int {
	queued := map[string]bool{}
	for _, task := range f.store.Tasks() {
		if task.Kind == payrouter.TaskCapture {
			queued[task.Gateway+" "+task.Reference] = true
		}
	}
	n := 0
	for name, g := range f.gw {
		for ref, st := range g.money() {
			if st == payrouter.TxCaptured || st == payrouter.TxAuthorized && queued[name+" "+ref] {
				n++
			}
		}
	}
	return n
}

// wantCaptureQueued checks that c was answered succeeded with its capture queued at its
// gateway, and that its authorization there is not captured yet (the capture comes after the
// answer).
func (f *hedgeFixture) wantCaptureQueued(t *testing.T, c *payrouter.Charge) {
	t.Helper()
	if c.Status != payrouter.StatusSucceeded || !c.CaptureQueued {
		t.Errorf("status %s, capture queued %v; want succeeded with its capture queued", c.Status, c.CaptureQueued)
	}
	task := "capture " + c.Gateway + " " + c.Reference
	if !slices.Contains(f.tasks(t), task) {
		t.Errorf("tasks %v; want %q queued before the answer", f.tasks(t), task)
	}
	if m := f.gw[c.Gateway].money(); m[c.Reference] != payrouter.TxAuthorized {
		t.Errorf("%s ledger %v; want %s authorized, its capture queued", c.Gateway, m, c.Reference)
	}
}

// wantCaptured checks that c was answered succeeded, captured in its own call (a sale), nothing
// queued to capture it.
func (f *hedgeFixture) wantCaptured(t *testing.T, c *payrouter.Charge) {
	t.Helper()
	if c.Status != payrouter.StatusSucceeded || c.CaptureQueued {
		t.Errorf("status %s, capture queued %v; want succeeded, captured", c.Status, c.CaptureQueued)
	}
	if m := f.gw[c.Gateway].money(); m[c.Reference] != payrouter.TxCaptured {
		t.Errorf("%s ledger %v; want %s captured", c.Gateway, m, c.Reference)
	}
	for _, task := range f.tasks(t) {
		if strings.HasPrefix(task, "capture ") {
			t.Errorf("task %q queued; want none", task)
		}
	}
}

func hedgeAttempts(c *payrouter.Charge) []string {
	var out []string
	for _, a := range c.Attempts {
		s := a.Gateway + "/" + string(a.Outcome)
		if a.Sale {
			s += " sale"
		}
		if a.Hedge {
			s += " hedge"
		}
		if a.Voided {
			s += " voided"
		}
		out = append(out, s)
	}
	return out
}

func want[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// TestHedgeNotNeededWhenTheFirstGatewayIsFast: a captured charge's first call is a sale, as on
// any route: one call, captured, nothing queued.
func TestHedgeNotNeededWhenTheFirstGatewayIsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		f.gw["paywell"].delay = 50 * time.Millisecond
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "paywell" {
			t.Fatalf("status %s at %q, err %v; want succeeded at paywell", c.Status, c.Gateway, err)
		}
		want(t, "attempts", hedgeAttempts(c), []string{"paywell/succeeded sale"})
		want(t, "paywell calls", f.gw["paywell"].callsLike(""), []string{"authorize ch_test-a1 capture=true"})
		want(t, "ding calls", f.gw["ding"].callsLike(""), nil)
		want(t, "hedges", f.obs.got(), nil)
		f.wantCaptured(t, c)
	})
}

// TestHedgeWinsWhileTheSaleRuns: the hedge's authorization answers first. The charge is answered
// at the hedge delay, succeeded with the hedge's capture queued to wait for the sale; the sale is
// never voided by the router, its late answer is handed to the Keeper, which settles the capture
// from it (payments: settle_test.go).
func TestHedgeWinsWhileTheSaleRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		slow := make(chan struct{})
		f.gw["paywell"].hold = slow
		start := time.Now()
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "ding" || c.Reference != "ch_test-a2" {
			t.Fatalf("status %s at %q (%s), err %v; want succeeded at ding", c.Status, c.Gateway, c.Reference, err)
		}
		if took := time.Since(start); took != 100*time.Millisecond {
			t.Errorf("the answer took %v; want the hedge delay and no more: paywell's slowness must not hold it", took)
		}
		want(t, "attempts", hedgeAttempts(c), []string{"paywell/unknown sale", "ding/succeeded hedge"})
		want(t, "ding calls", f.gw["ding"].callsLike(""), []string{"authorize ch_test-a2 capture=false"})
		// Queued before the answer: a crash now leaves the settlement to the queue.
		want(t, "tasks", f.tasks(t), []string{"capture ding ch_test-a2", "recheck paywell ch_test-a1"})
		f.wantCaptureQueued(t, c)

		close(slow)          // the sale captures, late
		f.router.late.Wait() // the late answer is handed over in the background
		want(t, "paywell calls", f.gw["paywell"].callsLike(""), []string{"authorize ch_test-a1 capture=true"})
		await, sales := f.keep.told()
		want(t, "QueueCapture awaits the sale", await, []bool{true})
		if len(sales) != 1 || sales[0].Outcome != payrouter.OutcomeSucceeded || sales[0].State != payrouter.TxCaptured {
			t.Errorf("sale answers handed over %+v; want its capture", sales)
		}
		want(t, "hedges", f.obs.got(), []string{"won_hedge"})
		stored, err := f.store.Charge(t.Context(), c.ID)
		if err != nil {
			t.Fatal(err)
		}
		want(t, "stored attempts", hedgeAttempts(stored), []string{"paywell/succeeded sale", "ding/succeeded hedge"})
		if stored.Status != payrouter.StatusSucceeded || !stored.CaptureQueued {
			t.Errorf("stored status %s, capture queued %v; want its settlement still to come", stored.Status, stored.CaptureQueued)
		}
	})
}
func TestHedgeBothApproveTheSaleWinsTheHedgeIsVoided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		f.gw["paywell"].delay = 150 * time.Millisecond // slower than the hedge delay, faster than ding
		slow := make(chan struct{})
		f.gw["ding"].hold = slow
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "paywell" {
			t.Fatalf("status %s at %q, err %v; want succeeded at paywell", c.Status, c.Gateway, err)
		}
		want(t, "attempts", hedgeAttempts(c), []string{"paywell/succeeded sale", "ding/unknown hedge"})
		close(slow)
		f.router.late.Wait() // the late answer is handled in the background
		if n := f.captured(); n != 1 {
			t.Errorf("%d captures over the gateways, want exactly 1", n)
		}
		if dg := f.gw["ding"].money(); dg["ch_test-a2"] != payrouter.TxVoided {
			t.Errorf("ding ledger %v; want ding's voided", dg)
		}
		f.wantCaptured(t, c)
		want(t, "hedges", f.obs.got(), []string{"won_primary", "voided"})
	})
}
func TestHedgeVoidThatFailsIsQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		f.gw["paywell"].delay = 150 * time.Millisecond
		slow := make(chan struct{})
		f.gw["ding"].hold = slow
		f.gw["ding"].voidFails = true
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "paywell" {
			t.Fatalf("status %s at %q, err %v; want succeeded at paywell", c.Status, c.Gateway, err)
		}
		close(slow)
		f.router.late.Wait() // the late answer is handled in the background
		want(t, "tasks", f.tasks(t), []string{"recheck ding ch_test-a2", "recheck paywell ch_test-a1", "void ding ch_test-a2"})
		if m := f.gw["ding"].money(); m["ch_test-a2"] != payrouter.TxAuthorized {
			t.Errorf("ding ledger %v; want the approval still authorized (never captured), for the queue to void", m)
		}

		// The queue's worker voids it (settle's release of a TaskVoid, tested there).
	})
}
func TestHedgeBudgetBoundsTheExtraCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := hedgeRoute
		rt.Hedge = &Hedge{After: HedgeAfter{Delay: 100 * time.Millisecond}, Budget: 0.5}
		f := newHedgeFixture(t, rt)
		f.gw["paywell"].delay = 300 * time.Millisecond
		var statuses []string
		for i := range 6 {
			c, err := charge(t.Context(), f.router, f.keep, chargeNamed(fmt.Sprintf("ch_%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			f.router.late.Wait()
			statuses = append(statuses, c.Gateway+"/"+string(c.Status))
		}
		// Budget 0.5: the first charge has half a call, the second a whole one, which pays for
		// the hedge; the settlement of its capture (the hedge's capture, or its void when the
		// sale captured) is paid by the next two charges, and the hedge after it by the two
		// after them: a hedge costs two calls.
		want(t, "charges", statuses, []string{"paywell/succeeded", "ding/succeeded", "paywell/succeeded", "paywell/succeeded", "paywell/succeeded", "ding/succeeded"})
		want(t, "ding authorizations", f.gw["ding"].callsLike("authorize"), []string{
			"authorize ch_1-a2 capture=false", "authorize ch_5-a2 capture=false"})
		// Every charge's first call is a sale, hedged or not.
		for i := range 6 {
			ref := fmt.Sprintf("ch_%d-a1", i)
			if got := f.gw["paywell"].callsLike("authorize " + ref); !slices.Equal(got, []string{"authorize " + ref + " capture=true"}) {
				t.Errorf("charge %d at paywell: %q", i, got)
			}
		}
		await, sales := f.keep.told()
		want(t, "QueueCapture awaits the sale", await, []bool{true, true})
		if len(sales) != 2 {
			t.Errorf("sale answers handed over %+v; want both hedged charges'", sales)
		}
	})
}
func TestHedgeNotSentToAnOpenBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t, Route{Name: "pair", Gateways: []string{"paywell", "ding"}, Hedge: &Hedge{After: HedgeAfter{Delay: 100 * time.Millisecond}, Budget: 1}})
		f.dom.Breaker("ding", payrouter.OpCharge).Force(payrouter.ForcedOpen)
		f.gw["paywell"].delay = 300 * time.Millisecond
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "paywell" {
			t.Fatalf("status %s at %q, err %v; want succeeded at paywell", c.Status, c.Gateway, err)
		}
		want(t, "attempts", hedgeAttempts(c), []string{"paywell/succeeded sale", "ding/breaker_open hedge"})
		want(t, "ding calls", f.gw["ding"].callsLike(""), nil)
		want(t, "hedges", f.obs.got(), nil)
		f.wantCaptured(t, c)
		// The refused hedge cost nothing: the budget still holds the next charge's hedge.
		if !f.router.table().hedgeBudgets["pair"].has() {
			t.Error("a hedge refused by the breaker spent the budget")
		}
	})
}

func TestHedgeAtP95(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Euro charges go to paywell alone and teach its latencies; dollar charges are hedged
		// at its p95.
		f := newHedgeFixture(t,
			Route{Name: "learn", Match: Match{Currency: []string{"EUR"}}, Gateways: []string{"paywell"}},
			Route{Name: "p95", Gateways: []string{"paywell", "ding"}, Hedge: &Hedge{After: HedgeAfter{P95: true}, Budget: 1}})
		euro := func(id string) *payrouter.Charge {
			c := chargeNamed(id)
			c.Currency = "EUR"
			return c
		}
		f.gw["paywell"].delay = 300 * time.Millisecond

		// Too few samples: no p95, no hedge; the charge goes the ordinary way.
		c, err := charge(t.Context(), f.router, f.keep, chargeNamed("ch_first"))
		if err != nil || c.Gateway != "paywell" || c.Status != payrouter.StatusSucceeded {
			t.Fatalf("status %s at %q, err %v", c.Status, c.Gateway, err)
		}
		want(t, "ding calls", f.gw["ding"].callsLike(""), nil)
		want(t, "paywell calls", f.gw["paywell"].callsLike(""), []string{"authorize ch_first-a1 capture=true"})

		// Twenty fast charges make paywell's p95 40ms; the next slow one is hedged then.
		f.gw["paywell"].delay = 40 * time.Millisecond
		for i := range minLatencySamples {
			if _, err := charge(t.Context(), f.router, f.keep, euro(fmt.Sprintf("ch_%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		f.gw["paywell"].delay = 300 * time.Millisecond
		start := time.Now()
		c, err = charge(t.Context(), f.router, f.keep, chargeNamed("ch_slow"))
		if err != nil || c.Gateway != "ding" || c.Status != payrouter.StatusSucceeded {
			t.Fatalf("status %s at %q, err %v; want the hedge at ding to win", c.Status, c.Gateway, err)
		}
		if took := time.Since(start); took != 40*time.Millisecond {
			t.Errorf("took %v; want paywell's p95, 40ms", took)
		}
	})
}

// TestHedgeCapturedChargeAnswersBeforeItsCapture: the point of queuing the capture. A winner
// whose capture would take a second (a gateway's heavy tail hits captures too) is answered at
// the hedge delay, not a second later.
func TestHedgeCapturedChargeAnswersBeforeItsCapture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		slow := make(chan struct{})
		f.gw["paywell"].hold = slow
		f.gw["ding"].captureDelay = time.Second
		start := time.Now()
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil || c.Gateway != "ding" {
			t.Fatalf("status %s at %q, err %v; want succeeded at ding", c.Status, c.Gateway, err)
		}
		if took := time.Since(start); took != 100*time.Millisecond {
			t.Errorf("the answer took %v; want the hedge delay: the capture is made after it", took)
		}
		f.wantCaptureQueued(t, c)
		want(t, "ding captures", f.gw["ding"].callsLike("capture"), nil)
		close(slow)
	})
}

// TestHedgeCaptureNotQueued: with no queue to keep the hedge's capture, it is made before the
// answer once the sale is known to hold nothing (only a confirmed one answers succeeded); while
// the sale may hold money nothing is captured, and the charge answers processing for the
// reconciler, which looks the sale up first.
func TestHedgeCaptureNotQueued(t *testing.T) {
	t.Run("the sale declined: captured before the answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newHedgeFixture(t)
			f.keep.noCaptureQueue = true
			f.gw["paywell"].delay = 150 * time.Millisecond
			f.gw["paywell"].decline = true
			f.gw["ding"].delay = 100 * time.Millisecond // answers at 200ms, after the sale's decline
			c, err := charge(t.Context(), f.router, f.keep, newCharge())
			if err != nil || c.Status != payrouter.StatusSucceeded || c.CaptureQueued || c.Gateway != "ding" {
				t.Fatalf("status %s at %q (capture queued %v), err %v; want succeeded at ding, captured", c.Status, c.Gateway, c.CaptureQueued, err)
			}
			if m := f.gw["ding"].money(); m["ch_test-a2"] != payrouter.TxCaptured {
				t.Errorf("ding ledger %v, want the charge captured before its answer", m)
			}
		})
	})
	t.Run("the sale still running: processing, nothing captured", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newHedgeFixture(t)
			f.keep.noCaptureQueue = true
			slow := make(chan struct{})
			f.gw["paywell"].hold = slow
			c, err := charge(t.Context(), f.router, f.keep, newCharge())
			if err != nil || c.Status != payrouter.StatusProcessing || c.Gateway != "ding" {
				t.Fatalf("status %s at %q, err %v; want processing at ding", c.Status, c.Gateway, err)
			}
			want(t, "ding captures", f.gw["ding"].callsLike("capture"), nil)
			close(slow)
			f.router.late.Wait()
			if n := f.captured(); n != 1 {
				t.Errorf("%d captures; want the sale's alone", n)
			}
		})
	})
}
func TestHedgeCaptureFailureLeavesTheChargeProcessing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		f.keep.noCaptureQueue = true
		f.gw["paywell"].delay = 150 * time.Millisecond
		f.gw["paywell"].decline = true
		f.gw["ding"].delay = 100 * time.Millisecond
		f.gw["ding"].captureFails = true
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil {
			t.Fatal(err)
		}
		// Never succeeded before the capture is confirmed: the reconciler finds ding's
		// authorization, with capture wanted, and captures it.
		if c.Status != payrouter.StatusProcessing || c.Gateway != "ding" || c.Reference != "ch_test-a2" || c.GatewayReference != "gw-ch_test-a2" {
			t.Errorf("status %s at %q (%s, %s); want processing at ding's authorization", c.Status, c.Gateway, c.Reference, c.GatewayReference)
		}
		if m := f.gw["ding"].money(); m["ch_test-a2"] != payrouter.TxAuthorized {
			t.Errorf("ding ledger %v", m)
		}
		if n := f.captured(); n != 0 {
			t.Errorf("%d captures; the capture failed", n)
		}
	})
}

func TestHedgeAuthorizeOnlyChargeRequiresCapture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		f.gw["paywell"].delay = 300 * time.Millisecond
		c := newCharge()
		c.Capture = false
		if _, err := charge(t.Context(), f.router, f.keep, c); err != nil || c.Status != payrouter.StatusRequiresCapture || c.Gateway != "ding" {
			t.Fatalf("status %s at %q, err %v; want requires_capture at ding", c.Status, c.Gateway, err)
		}
		want(t, "ding calls", f.gw["ding"].callsLike(""), []string{"authorize ch_test-a2 capture=false"})
	})
}

func TestHedgeDeclineWaitsForTheOtherAttempt(t *testing.T) {
	t.Run("an approval there wins", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newHedgeFixture(t)
			f.gw["paywell"].delay = 300 * time.Millisecond
			f.gw["ding"].decline = true
			c, err := charge(t.Context(), f.router, f.keep, newCharge())
			if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "paywell" {
				t.Fatalf("status %s at %q, err %v; want paywell's approval", c.Status, c.Gateway, err)
			}
			want(t, "attempts", hedgeAttempts(c), []string{"paywell/succeeded sale", "ding/declined hedge"})
			want(t, "hedges", f.obs.got(), []string{"won_primary"})
		})
	})
	t.Run("a decline there too ends it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newHedgeFixture(t)
			f.gw["paywell"].delay = 300 * time.Millisecond
			f.gw["paywell"].decline = true
			f.gw["ding"].decline = true
			c, err := charge(t.Context(), f.router, f.keep, newCharge())
			if err != nil || c.Status != payrouter.StatusDeclined || c.DeclineCode != "do_not_honor" {
				t.Fatalf("status %s (%s), err %v; want declined", c.Status, c.DeclineCode, err)
			}
			want(t, "tranglo calls", f.gw["tranglo"].callsLike(""), nil)
		})
	})
}

func TestHedgeNeitherProcessedFailsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		f.gw["paywell"].delay = 300 * time.Millisecond
		f.gw["paywell"].answer = payrouter.OutcomeUnavailable
		f.gw["ding"].answer = payrouter.OutcomeUnavailable
		c, err := charge(t.Context(), f.router, f.keep, newCharge())
		if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "tranglo" {
			t.Fatalf("status %s at %q, err %v; want succeeded at tranglo", c.Status, c.Gateway, err)
		}
		want(t, "attempts", hedgeAttempts(c), []string{"paywell/unavailable sale", "ding/unavailable hedge", "tranglo/succeeded"})
		want(t, "tranglo calls", f.gw["tranglo"].callsLike(""), []string{"authorize ch_test-a3 capture=true"})
	})
}

func TestHedgeUnknownAttemptNeverMovesToAThirdGateway(t *testing.T) {
	t.Run("the other approval is known: it wins, the unknown one is rechecked", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newHedgeFixture(t)
			f.gw["paywell"].delay = 150 * time.Millisecond
			f.gw["paywell"].answer = payrouter.OutcomeTimeout
			f.gw["paywell"].statusFails = true
			f.gw["ding"].delay = 100 * time.Millisecond // answers at 200ms, after paywell's timeout
			c, err := charge(t.Context(), f.router, f.keep, newCharge())
			if err != nil || c.Status != payrouter.StatusSucceeded || c.Gateway != "ding" {
				t.Fatalf("status %s at %q, err %v; want ding's approval", c.Status, c.Gateway, err)
			}
			want(t, "attempts", hedgeAttempts(c), []string{"paywell/timeout sale", "ding/succeeded hedge"})
			want(t, "tasks", f.tasks(t), []string{"capture ding ch_test-a2", "recheck paywell ch_test-a1"})
			want(t, "tranglo calls", f.gw["tranglo"].callsLike(""), nil)
			// The sale answered, unknown: the capture settles by looking it up, with no
			// answer to wait for.
			await, _ := f.keep.told()
			want(t, "QueueCapture awaits the sale", await, []bool{false})
		})
	})
	t.Run("no approval: processing, nothing sent further", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newHedgeFixture(t)
			f.gw["paywell"].delay = 150 * time.Millisecond
			f.gw["paywell"].answer = payrouter.OutcomeTimeout
			f.gw["paywell"].statusFails = true
			f.gw["ding"].answer = payrouter.OutcomeUnavailable
			c, err := charge(t.Context(), f.router, f.keep, newCharge())
			if err != nil || c.Status != payrouter.StatusProcessing || c.Gateway != "paywell" {
				t.Fatalf("status %s at %q, err %v; want processing at paywell", c.Status, c.Gateway, err)
			}
			want(t, "tranglo calls", f.gw["tranglo"].callsLike(""), nil)
		})
	})
}

func TestHedgeNeverForAPinnedGateway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newHedgeFixture(t)
		f.gw["paywell"].delay = 300 * time.Millisecond
		c := newCharge()
		c.PinnedGateway = "paywell"
		if _, err := charge(t.Context(), f.router, f.keep, c); err != nil || c.Status != payrouter.StatusSucceeded {
			t.Fatalf("status %s, err %v", c.Status, err)
		}
		want(t, "paywell calls", f.gw["paywell"].callsLike(""), []string{"authorize ch_test-a1 capture=true"})
		want(t, "ding calls", f.gw["ding"].callsLike(""), nil)
	})
}

func TestLatencyP95(t *testing.T) {
	var l latencies
	for i := 1; i < minLatencySamples; i++ {
		l.add(time.Duration(i) * time.Millisecond)
	}
	if _, ok := l.p95(); ok {
		t.Error("p95 with fewer than the minimum of samples")
	}
	for i := minLatencySamples; i <= 2*latencyWindow; i++ {
		l.add(time.Duration(i) * time.Millisecond)
	}
	// The window holds 101..200ms: the 95th of 100 is 195ms.
	if d, ok := l.p95(); !ok || d != 195*time.Millisecond {
		t.Errorf("p95 = %v, %v; want 195ms over the last %d", d, ok, latencyWindow)
	}
}
