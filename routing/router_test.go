package routing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/resilience"
)

// scripted is an in-process gateway whose answers a test sets: the router's rules are what is
// under test here; the real adapters and simulators are tested in gateways/ and e2e/.
type scripted struct {
	mu        sync.Mutex
	authorize payrouter.Result
	status    payrouter.Result
	calls     []string // "authorize:<reference>", "status:<reference>"
	onCall    func()
}

func (g *scripted) record(call string) {
	g.mu.Lock()
	g.calls = append(g.calls, call)
	f := g.onCall
	g.mu.Unlock()
	if f != nil {
		f()
	}
}

func (g *scripted) Authorize(_ context.Context, req payrouter.ChargeRequest) payrouter.Result {
	g.record("authorize:" + req.Reference)
	return g.authorize
}
func (g *scripted) Status(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	g.record("status:" + req.Reference)
	return g.status
}
func (g *scripted) Capture(context.Context, payrouter.TxRequest) payrouter.Result { return g.authorize }
func (g *scripted) Void(context.Context, payrouter.TxRequest) payrouter.Result    { return g.authorize }
func (g *scripted) Refund(context.Context, payrouter.TxRequest) payrouter.Result  { return g.authorize }
func (g *scripted) Health(context.Context) error                                  { return nil }

var (
	approved    = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_1"}
	declined    = payrouter.Result{Outcome: payrouter.OutcomeDeclined, DeclineCode: "insufficient_funds"}
	unavailable = payrouter.Result{Outcome: payrouter.OutcomeUnavailable}
	timedOut    = payrouter.Result{Outcome: payrouter.OutcomeTimeout}
	pending     = payrouter.Result{Outcome: payrouter.OutcomePending}
	notFound    = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxNotFound}
	foundIt     = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured, GatewayReference: "gw_late"}
)

type fixture struct {
	router *Router
	store  *memstore.Store
	keep   *storeKeeper
	gw     map[string]*scripted
	dom    *resilience.Domains
}

func newFixture(t *testing.T, routes ...Route) *fixture {
	t.Helper()
	names := []string{"paywell", "ding", "tranglo"}
	var settings []resilience.GatewaySettings
	f := &fixture{store: memstore.New(), gw: map[string]*scripted{}}
	f.keep = &storeKeeper{charges: f.store, queue: f.store}
	adapters := map[string]payrouter.Gateway{}
	for _, n := range names {
		settings = append(settings, resilience.GatewaySettings{Name: n, TimeoutSettings: resilience.TimeoutSettings{Timeout: time.Second}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 100, Cooldown: time.Minute}}})
		f.gw[n] = &scripted{authorize: approved, status: notFound}
		adapters[n] = f.gw[n]
	}
	f.dom = resilience.NewDomains(settings, nil)
	t.Cleanup(f.dom.Close)
	if len(routes) == 0 {
		routes = []Route{{Name: "default", Gateways: names}}
	}
	var err error
	f.router, err = New(Config{Routes: routes, Gateways: adapters, Domains: f.dom, Budget: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func newCharge() *payrouter.Charge {
	return &payrouter.Charge{ID: "ch_test", Amount: 1999, Currency: "USD", Capture: true,
		PaymentMethod: payrouter.PaymentMethod{Type: "card", Token: "tok_visa"}}
}

func attempts(c *payrouter.Charge) []string {
	var out []string
	for _, a := range c.Attempts {
		out = append(out, a.Gateway+"/"+string(a.Outcome))
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestChargeFailoverRules(t *testing.T) {
	cases := []struct {
		name         string
		setup        func(f *fixture)
		wantStatus   payrouter.ChargeStatus
		wantGateway  string
		wantAttempts []string
		wantFallback bool
		dingCalled   bool
	}{
		{"first gateway approves", func(f *fixture) {}, payrouter.StatusSucceeded, "paywell",
			[]string{"paywell/succeeded"}, false, false},
		{"unavailable fails over", func(f *fixture) { f.gw["paywell"].authorize = unavailable }, payrouter.StatusSucceeded, "ding",
			[]string{"paywell/unavailable", "ding/succeeded"}, false, true},
		{"open breaker is passed without a call", func(f *fixture) {
			f.dom.Breaker("paywell", payrouter.OpCharge).Force(payrouter.ForcedOpen)
		}, payrouter.StatusSucceeded, "ding", []string{"paywell/breaker_open", "ding/succeeded"}, false, true},
		{"a decline never fails over", func(f *fixture) { f.gw["paywell"].authorize = declined }, payrouter.StatusDeclined, "paywell",
			[]string{"paywell/declined"}, false, false},
		{"pending never fails over", func(f *fixture) { f.gw["paywell"].authorize = pending }, payrouter.StatusProcessing, "paywell",
			[]string{"paywell/pending"}, false, false},
		{"timeout resolved as never received fails over", func(f *fixture) {
			f.gw["paywell"].authorize, f.gw["paywell"].status = timedOut, notFound
		}, payrouter.StatusSucceeded, "ding", []string{"paywell/timeout", "ding/succeeded"}, false, true},
		{"timeout resolved as captured is a success there", func(f *fixture) {
			f.gw["paywell"].authorize, f.gw["paywell"].status = timedOut, foundIt
		}, payrouter.StatusSucceeded, "paywell", []string{"paywell/timeout"}, false, false},
		{"timeout with a failed look-up stays processing and goes nowhere else", func(f *fixture) {
			f.gw["paywell"].authorize, f.gw["paywell"].status = timedOut, timedOut
		}, payrouter.StatusProcessing, "paywell", []string{"paywell/timeout"}, false, false},
		{"every gateway unavailable answers the fallback", func(f *fixture) {
			for _, g := range f.gw {
				g.authorize = unavailable
			}
		}, payrouter.StatusFailed, "", []string{"paywell/unavailable", "ding/unavailable", "tranglo/unavailable"}, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tc.setup(f)
			c, err := charge(t.Context(), f.router, f.keep, newCharge())
			var u *fallback.Unavailable
			if gotFallback := errors.As(err, &u); gotFallback != tc.wantFallback {
				t.Fatalf("err = %v, want fallback %v", err, tc.wantFallback)
			}
			if c.Status != tc.wantStatus || c.Gateway != tc.wantGateway || !equal(attempts(c), tc.wantAttempts) {
				t.Errorf("got status %s gateway %q attempts %v; want %s %q %v", c.Status, c.Gateway, attempts(c),
					tc.wantStatus, tc.wantGateway, tc.wantAttempts)
			}
			if called := len(f.gw["ding"].calls) > 0; called != tc.dingCalled {
				t.Errorf("ding called = %v (%v), want %v", called, f.gw["ding"].calls, tc.dingCalled)
			}
			stored, err := f.store.Charge(t.Context(), c.ID)
			if err != nil || stored.Status != c.Status || len(stored.Attempts) != len(c.Attempts) {
				t.Errorf("stored charge %+v, %v; want the answer's status %s", stored, err, c.Status)
			}
		})
	}
}

func TestChargeReferencesDifferPerAttemptAndLookUpUsesTheSame(t *testing.T) {
	f := newFixture(t)
	f.gw["paywell"].authorize, f.gw["paywell"].status = timedOut, notFound
	c, err := charge(t.Context(), f.router, f.keep, newCharge())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"authorize:ch_test-a1", "status:ch_test-a1"}
	if !equal(f.gw["paywell"].calls, want) {
		t.Errorf("paywell calls %v, want %v", f.gw["paywell"].calls, want)
	}
	if !equal(f.gw["ding"].calls, []string{"authorize:ch_test-a2"}) {
		t.Errorf("ding calls %v, want a second reference", f.gw["ding"].calls)
	}
	if c.Attempts[0].Resolved != payrouter.TxNotFound || c.Reference != "ch_test-a2" {
		t.Errorf("attempts %+v reference %q", c.Attempts, c.Reference)
	}
}

func TestChargePinnedGatewayNeverFailsOver(t *testing.T) {
	f := newFixture(t)
	f.gw["ding"].authorize = unavailable
	c := newCharge()
	c.PinnedGateway = "ding"
	_, err := charge(t.Context(), f.router, f.keep, c)
	var u *fallback.Unavailable
	if !errors.As(err, &u) || !equal(attempts(c), []string{"ding/unavailable"}) {
		t.Fatalf("err %v attempts %v; want the fallback after ding alone", err, attempts(c))
	}
	if len(f.gw["paywell"].calls) != 0 {
		t.Errorf("paywell called for a charge pinned to ding: %v", f.gw["paywell"].calls)
	}
	c = newCharge()
	c.PinnedGateway = "stripe"
	if _, err := charge(t.Context(), f.router, f.keep, c); payrouter.Code(err) != payrouter.EInvalid {
		t.Errorf("pinned to an unknown gateway: err %v, want invalid", err)
	}
}

func TestChargeIsStoredBeforeTheFirstCall(t *testing.T) {
	f := newFixture(t)
	var seen payrouter.ChargeStatus
	f.gw["paywell"].onCall = func() {
		c, err := f.store.Charge(context.Background(), "ch_test")
		if err == nil {
			seen = c.Status
		}
	}
	if _, err := charge(t.Context(), f.router, f.keep, newCharge()); err != nil {
		t.Fatal(err)
	}
	if seen != payrouter.StatusProcessing {
		t.Errorf("during the gateway call the stored charge was %q; want processing, so a crash leaves it for reconciliation", seen)
	}
}

func TestAuthorizeOnlyRequiresCapture(t *testing.T) {
	f := newFixture(t)
	f.gw["paywell"].authorize = payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxAuthorized}
	c := newCharge()
	c.Capture = false
	if _, err := charge(t.Context(), f.router, f.keep, c); err != nil || c.Status != payrouter.StatusRequiresCapture {
		t.Fatalf("status %s err %v, want requires_capture", c.Status, err)
	}
}

func TestCandidatesByRoute(t *testing.T) {
	routes := []Route{
		{Name: "asia", Match: Match{Currency: []string{"MYR", "SGD"}, Country: []string{"MY", "SG"}}, Gateways: []string{"tranglo", "paywell"}},
		{Name: "big", Match: Match{MinAmount: 100000}, Split: []Weight{{"paywell", 70}, {"ding", 30}}, Gateways: []string{"tranglo"}},
		{Name: "default", Gateways: []string{"paywell", "ding", "tranglo"}},
	}
	f := newFixture(t, routes...)
	cases := []struct {
		name     string
		amount   int64
		currency string
		country  string
		draw     int
		route    string
		want     []string
	}{
		{"asia needs currency and country", 500, "MYR", "MY", 0, "asia", []string{"tranglo", "paywell"}},
		{"currency alone is not asia", 500, "MYR", "US", 0, "default", []string{"paywell", "ding", "tranglo"}},
		{"big ticket, draw lands on paywell", 200000, "USD", "", 69, "big", []string{"paywell", "ding", "tranglo"}},
		{"big ticket, draw lands on ding", 200000, "USD", "", 70, "big", []string{"ding", "paywell", "tranglo"}},
		{"below the minimum", 99999, "USD", "", 0, "default", []string{"paywell", "ding", "tranglo"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f.router.rnd = func(n int) int {
				if n != 100 {
					t.Fatalf("draw over %d, want the sum of the weights", n)
				}
				return tc.draw
			}
			route, got, err := f.router.Candidates(&payrouter.Charge{Amount: tc.amount, Currency: tc.currency, Country: tc.country})
			if err != nil || route != tc.route || !equal(got, tc.want) {
				t.Errorf("got %s %v %v; want %s %v", route, got, err, tc.route, tc.want)
			}
		})
	}
}

func TestChargeNoGatewayCalledIsNeverStored(t *testing.T) {
	f := newFixture(t)
	for _, n := range []string{"paywell", "ding", "tranglo"} {
		f.dom.Breaker(n, payrouter.OpCharge).Force(payrouter.ForcedOpen)
	}
	_, err := charge(t.Context(), f.router, f.keep, newCharge())
	var u *fallback.Unavailable
	if !errors.As(err, &u) || u.ChargeID != "" {
		t.Fatalf("err %v; want the fallback with no charge id to look up", err)
	}
	if _, err := f.store.Charge(t.Context(), "ch_test"); !errors.Is(err, payrouter.ErrNotFound) {
		t.Errorf("a charge no gateway was called for was stored (%v): an outage would fill the store", err)
	}
}

// failingStore refuses every write.
type failingStore struct{ *memstore.Store }

func (failingStore) SaveCharge(context.Context, *payrouter.Charge) error {
	return errors.New("disk on fire")
}

func TestChargeThatCannotBeStoredIsNeverSent(t *testing.T) {
	f := newFixture(t)
	f.keep.charges = failingStore{f.store}
	_, err := charge(t.Context(), f.router, f.keep, newCharge())
	if err == nil || payrouter.Code(err) != payrouter.EInternal {
		t.Fatalf("err %v; want an internal error", err)
	}
	for n, g := range f.gw {
		if len(g.calls) != 0 {
			t.Errorf("%s was called for a charge that could not be stored: %v", n, g.calls)
		}
	}
	if b := f.dom.Breaker("paywell", payrouter.OpCharge).Snapshot(); b.Counts.Failures != 0 {
		t.Errorf("a store failure counted against paywell's breaker: %+v", b.Counts)
	}
}

// charge runs c through r as the settler does (payments.Service.Charge), keep storing what the
// attempts change, then the final state stored in the charge store, which httpapi does with the
// idempotency answer (payrouter.Store.CompleteCharge). The router never stores anything itself.
func charge(ctx context.Context, r *Router, keep *storeKeeper, c *payrouter.Charge) (*payrouter.Charge, error) {
	ch, err := r.Route(ctx, c, keep)
	if final := FinalState(ch, err); final != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if serr := keep.charges.SaveCharge(sctx, final); serr != nil {
			return ch, fmt.Errorf("storing the final state of charge %s: %w", final.ID, serr)
		}
	}
	return ch, err
}

// storeKeeper is the routing.Keeper of the tests: the charge store and the task queue written
// directly, as payments.Service writes them.
type storeKeeper struct {
	charges payrouter.ChargeStore
	queue   payrouter.Queue
	// noCaptureQueue makes QueueCapture fail, as a queue that does not answer does.
	noCaptureQueue bool
	// mu guards what SaleAnswered and QueueCapture were told.
	mu        sync.Mutex
	awaitSale []bool             // by QueueCapture, in order
	sales     []payrouter.Result // by SaleAnswered, in order
}

func (k *storeKeeper) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	return k.charges.SaveCharge(ctx, c)
}

func (k *storeKeeper) ReleaseLater(ctx context.Context, kind payrouter.TaskKind, c *payrouter.Charge, gateway, ref, gwRef string, after time.Duration) {
	if k.queue == nil {
		return
	}
	now := time.Now().UTC()
	_, _ = k.queue.Enqueue(context.WithoutCancel(ctx), payrouter.Task{Kind: kind, Gateway: gateway, ChargeID: c.ID, Reference: ref,
		GatewayReference: gwRef, Amount: c.Amount, Currency: c.Currency, NotBefore: now.Add(after), CreatedAt: now})
}

func (k *storeKeeper) QueueCapture(ctx context.Context, c *payrouter.Charge, gateway, ref, gwRef string, awaitSale bool) error {
	k.mu.Lock()
	k.awaitSale = append(k.awaitSale, awaitSale)
	k.mu.Unlock()
	if k.queue == nil || k.noCaptureQueue {
		return errors.New("no queue")
	}
	now := time.Now().UTC()
	_, err := k.queue.Enqueue(context.WithoutCancel(ctx), payrouter.Task{Kind: payrouter.TaskCapture, Gateway: gateway, ChargeID: c.ID,
		Reference: ref, GatewayReference: gwRef, Amount: c.Amount, Currency: c.Currency, NotBefore: now, CreatedAt: now})
	return err
}

func (k *storeKeeper) SaleAnswered(_ string, res payrouter.Result) {
	k.mu.Lock()
	k.sales = append(k.sales, res)
	k.mu.Unlock()
}

// told returns what QueueCapture was told of awaiting a sale, and the sales' answers handed over.
func (k *storeKeeper) told() ([]bool, []payrouter.Result) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.awaitSale), slices.Clone(k.sales)
}

func (k *storeKeeper) NoteLateAnswer(ctx context.Context, chargeID, ref string, late payrouter.Attempt) error {
	for {
		c, err := k.charges.Charge(ctx, chargeID)
		if err != nil || c.Status == payrouter.StatusProcessing {
			return err
		}
		for i := range c.Attempts {
			if at := &c.Attempts[i]; at.Gateway == late.Gateway && at.Reference == ref {
				at.Outcome, at.Duration, at.Voided, at.Reference = late.Outcome, late.Duration, at.Voided || late.Voided, late.Reference
			}
		}
		if err := k.charges.SaveCharge(ctx, c); !errors.Is(err, payrouter.ErrStale) {
			return err
		}
	}
}
