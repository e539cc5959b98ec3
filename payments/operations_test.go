package payments

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
)

// opGateway is an in-process gateway for the operations on a charge: each operation answers what
// the test set, every call is recorded with its reference, and refunds go into a ledger keyed by
// reference, as a real gateway's idempotency would keep them: one reference is applied once.
type opGateway struct {
	mu      sync.Mutex
	answers map[payrouter.Operation]payrouter.Result
	// appliedOnTimeout: a refund answered with a timeout was applied all the same (the answer was
	// lost, not the request).
	appliedOnTimeout bool
	calls            []string // "<op>:<reference>"
	refunded         map[string]int64
	onCall           func(op payrouter.Operation)
	// authorize answers charges (unset: refused as not under test).
	authorize payrouter.Result
	// onAuthorize, when set, is called as a charge reaches the gateway.
	onAuthorize func()
}

func newOpGateway() *opGateway {
	return &opGateway{answers: map[payrouter.Operation]payrouter.Result{
		payrouter.OpCapture: {Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured},
		payrouter.OpVoid:    {Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxVoided},
		payrouter.OpRefund:  {Outcome: payrouter.OutcomeSucceeded, GatewayReference: "gw_re"},
		payrouter.OpStatus:  {Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxNotFound},
	}, refunded: map[string]int64{}}
}

func (g *opGateway) set(op payrouter.Operation, res payrouter.Result) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.answers[op] = res
}

func (g *opGateway) call(op payrouter.Operation, req payrouter.TxRequest) payrouter.Result {
	g.mu.Lock()
	g.calls = append(g.calls, string(op)+":"+req.Reference)
	res := g.answers[op]
	if op == payrouter.OpRefund && (res.Outcome == payrouter.OutcomeSucceeded || g.appliedOnTimeout && res.Outcome.MayHaveProcessed()) {
		if _, done := g.refunded[req.Reference]; !done {
			g.refunded[req.Reference] = req.Amount
		}
	}
	f := g.onCall
	g.mu.Unlock()
	if f != nil {
		f(op)
	}
	return res
}

func (g *opGateway) Calls() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.calls...)
}

// Applied is the money the gateway's ledger gave back.
func (g *opGateway) Applied() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var sum int64
	for _, a := range g.refunded {
		sum += a
	}
	return sum
}

func (g *opGateway) Authorize(_ context.Context, req payrouter.ChargeRequest) payrouter.Result {
	if g.onAuthorize != nil {
		g.onAuthorize()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls = append(g.calls, "authorize:"+req.Reference)
	if g.authorize.Outcome == "" {
		return payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "not under test"}
	}
	return g.authorize
}
func (g *opGateway) Capture(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	return g.call(payrouter.OpCapture, req)
}
func (g *opGateway) Void(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	return g.call(payrouter.OpVoid, req)
}
func (g *opGateway) Refund(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	return g.call(payrouter.OpRefund, req)
}
func (g *opGateway) Status(_ context.Context, req payrouter.TxRequest) payrouter.Result {
	return g.call(payrouter.OpStatus, req)
}
func (g *opGateway) Health(context.Context) error { return nil }

// fallbackLog records what the Service told its Observer.
type fallbackLog struct {
	mu        sync.Mutex
	used      []string // "<op>/<policy>"
	notQueued []payrouter.TaskKind
}

func (o *fallbackLog) FallbackUsed(op payrouter.Operation, p fallback.Policy) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.used = append(o.used, string(op)+"/"+string(p))
}
func (o *fallbackLog) HedgeDone(string)                                       {}
func (o *fallbackLog) ChargeReconciled(payrouter.ChargeStatus, time.Duration) {}
func (o *fallbackLog) notQueuedKinds() []payrouter.TaskKind {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.notQueued)
}

func (o *fallbackLog) TaskNotQueued(kind payrouter.TaskKind) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.notQueued = append(o.notQueued, kind)
}

func (o *fallbackLog) Used() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.used...)
}

type opsFixture struct {
	settler *Service
	store   *memstore.Store
	gw      *opGateway
	dom     *resilience.Domains
	obs     *fallbackLog
	now     time.Time
}

type opsOption func(*Config, *resilience.GatewaySettings)

func withRefundFallback(p fallback.Policy) opsOption {
	return func(c *Config, _ *resilience.GatewaySettings) { c.Fallbacks.Refund = p }
}

func withStatusFallback(p fallback.Policy) opsOption {
	return func(c *Config, _ *resilience.GatewaySettings) { c.Fallbacks.Status = p }
}

func tripAfter(n int) opsOption {
	return func(_ *Config, s *resilience.GatewaySettings) { s.Breaker.ConsecutiveFailures = n }
}

const (
	opsBudget  = 2 * time.Second
	opsTimeout = time.Second
)

func newOpsFixture(t *testing.T, opts ...opsOption) *opsFixture {
	t.Helper()
	f := &opsFixture{gw: newOpGateway(), obs: &fallbackLog{}, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	f.store = memstore.New(memstore.WithClock(func() time.Time { return f.now }))
	settings := resilience.GatewaySettings{Name: "paywell", TimeoutSettings: resilience.TimeoutSettings{Timeout: opsTimeout}, BulkheadSettings: resilience.BulkheadSettings{MaxConcurrent: 4}, Breaker: resilience.BreakerSettings{BreakerRules: payrouter.BreakerRules{ConsecutiveFailures: 100, Cooldown: time.Minute}}}
	cfg := Config{Charges: f.store, Refunds: f.store, Queue: f.store, Budget: opsBudget, Observer: f.obs}
	for _, o := range opts {
		o(&cfg, &settings)
	}
	f.dom = resilience.NewDomains([]resilience.GatewaySettings{settings}, nil)
	t.Cleanup(f.dom.Close)
	router, err := routing.New(routing.Config{
		Routes:   []routing.Route{{Name: "default", Gateways: []string{"paywell"}}},
		Gateways: map[string]payrouter.Gateway{"paywell": f.gw}, Domains: f.dom, Budget: opsBudget, Fallbacks: cfg.Fallbacks,
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Router = router
	f.settler = New(cfg)
	f.settler.now = func() time.Time { return f.now }
	return f
}

// charge stores a charge answered by paywell in the given status and returns it.
func (f *opsFixture) charge(t *testing.T, status payrouter.ChargeStatus, change ...func(*payrouter.Charge)) *payrouter.Charge {
	t.Helper()
	c := &payrouter.Charge{
		ID: "ch_test", Status: status, Amount: 1999, Currency: "USD", Capture: status != payrouter.StatusRequiresCapture,
		Gateway: "paywell", Reference: "ch_test-a1", GatewayReference: "gw_1",
		Attempts:  []payrouter.Attempt{{Gateway: "paywell", Outcome: payrouter.OutcomeSucceeded, Reference: "ch_test-a1"}},
		CreatedAt: f.now, UpdatedAt: f.now,
	}
	for _, ch := range change {
		ch(c)
	}
	if err := f.store.SaveCharge(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *opsFixture) stored(t *testing.T) *payrouter.Charge {
	t.Helper()
	c, err := f.store.Charge(t.Context(), "ch_test")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *opsFixture) tasks(t *testing.T) []payrouter.Task {
	t.Helper()
	ts, err := f.store.Take(t.Context(), "test", 100, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

var (
	opTimeout     = payrouter.Result{Outcome: payrouter.OutcomeTimeout, Detail: "deadline exceeded"}
	opUnavailable = payrouter.Result{Outcome: payrouter.OutcomeUnavailable, Detail: "503"}
	opDeclined    = payrouter.Result{Outcome: payrouter.OutcomeDeclined, DeclineCode: "expired_authorization"}
	opMalformed   = payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "invalid amount"}
)

func lookedUp(s payrouter.TxState) payrouter.Result {
	return payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: s}
}

// errKind names what an operation returned, for table tests.
func errKind(err error) string {
	var u *fallback.Unavailable
	switch {
	case err == nil:
		return ""
	case errors.As(err, &u):
		return "unavailable:" + string(u.Operation)
	default:
		return string(payrouter.Code(err))
	}
}

func TestCaptureAndVoid(t *testing.T) {
	cases := []struct {
		name       string
		op         payrouter.Operation
		start      payrouter.ChargeStatus
		answer     payrouter.Result
		lookup     payrouter.Result
		wantErr    string
		wantStatus payrouter.ChargeStatus // stored afterwards
		wantCalls  []string
	}{
		{"capture succeeds", payrouter.OpCapture, payrouter.StatusRequiresCapture, lookedUp(payrouter.TxCaptured), lookedUp(payrouter.TxNotFound),
			"", payrouter.StatusSucceeded, []string{"capture:ch_test-a1-capture"}},
		{"capture not sent answers 503", payrouter.OpCapture, payrouter.StatusRequiresCapture, opUnavailable, lookedUp(payrouter.TxNotFound),
			"unavailable:capture", payrouter.StatusRequiresCapture, []string{"capture:ch_test-a1-capture"}},
		{"capture timeout, found captured", payrouter.OpCapture, payrouter.StatusRequiresCapture, opTimeout, lookedUp(payrouter.TxCaptured),
			"", payrouter.StatusSucceeded, []string{"capture:ch_test-a1-capture", "status:ch_test-a1"}},
		{"capture timeout, still authorized: retry later", payrouter.OpCapture, payrouter.StatusRequiresCapture, opTimeout, lookedUp(payrouter.TxAuthorized),
			"unavailable:capture", payrouter.StatusRequiresCapture, []string{"capture:ch_test-a1-capture", "status:ch_test-a1"}},
		{"capture timeout, look-up fails too", payrouter.OpCapture, payrouter.StatusRequiresCapture, opTimeout, opTimeout,
			"unavailable:capture", payrouter.StatusRequiresCapture, []string{"capture:ch_test-a1-capture", "status:ch_test-a1"}},
		{"capture declined", payrouter.OpCapture, payrouter.StatusRequiresCapture, opDeclined, lookedUp(payrouter.TxNotFound),
			string(payrouter.EGatewayError), payrouter.StatusRequiresCapture, []string{"capture:ch_test-a1-capture"}},
		{"capture refused as malformed", payrouter.OpCapture, payrouter.StatusRequiresCapture, opMalformed, lookedUp(payrouter.TxNotFound),
			string(payrouter.EGatewayError), payrouter.StatusRequiresCapture, []string{"capture:ch_test-a1-capture"}},
		{"capture of a captured charge", payrouter.OpCapture, payrouter.StatusSucceeded, lookedUp(payrouter.TxCaptured), lookedUp(payrouter.TxNotFound),
			string(payrouter.EState), payrouter.StatusSucceeded, nil},
		{"capture of a processing charge", payrouter.OpCapture, payrouter.StatusProcessing, lookedUp(payrouter.TxCaptured), lookedUp(payrouter.TxNotFound),
			string(payrouter.EState), payrouter.StatusProcessing, nil},
		{"void succeeds", payrouter.OpVoid, payrouter.StatusRequiresCapture, lookedUp(payrouter.TxVoided), lookedUp(payrouter.TxNotFound),
			"", payrouter.StatusVoided, []string{"void:ch_test-a1-void"}},
		{"void timeout, found voided", payrouter.OpVoid, payrouter.StatusRequiresCapture, opTimeout, lookedUp(payrouter.TxVoided),
			"", payrouter.StatusVoided, []string{"void:ch_test-a1-void", "status:ch_test-a1"}},
		{"void timeout, still authorized", payrouter.OpVoid, payrouter.StatusRequiresCapture, opTimeout, lookedUp(payrouter.TxAuthorized),
			"unavailable:void", payrouter.StatusRequiresCapture, []string{"void:ch_test-a1-void", "status:ch_test-a1"}},
		{"void not sent", payrouter.OpVoid, payrouter.StatusRequiresCapture, opUnavailable, lookedUp(payrouter.TxNotFound),
			"unavailable:void", payrouter.StatusRequiresCapture, []string{"void:ch_test-a1-void"}},
		{"void refused", payrouter.OpVoid, payrouter.StatusRequiresCapture, opMalformed, lookedUp(payrouter.TxNotFound),
			string(payrouter.EGatewayError), payrouter.StatusRequiresCapture, []string{"void:ch_test-a1-void"}},
		{"void of a captured charge", payrouter.OpVoid, payrouter.StatusSucceeded, lookedUp(payrouter.TxVoided), lookedUp(payrouter.TxNotFound),
			string(payrouter.EState), payrouter.StatusSucceeded, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			f.charge(t, tc.start)
			f.gw.set(tc.op, tc.answer)
			f.gw.set(payrouter.OpStatus, tc.lookup)
			run := f.settler.Capture
			if tc.op == payrouter.OpVoid {
				run = f.settler.Void
			}
			c, err := run(t.Context(), "ch_test")
			if got := errKind(err); got != tc.wantErr {
				t.Fatalf("err %v (%s), want %q", err, got, tc.wantErr)
			}
			if err == nil && c.Status != tc.wantStatus {
				t.Errorf("answered status %s, want %s", c.Status, tc.wantStatus)
			}
			if got := f.stored(t).Status; got != tc.wantStatus {
				t.Errorf("stored status %s, want %s", got, tc.wantStatus)
			}
			if got := f.gw.Calls(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("gateway calls %v, want %v", got, tc.wantCalls)
			}
			var u *fallback.Unavailable
			if errors.As(err, &u) {
				if len(u.Attempts) != 1 || u.Attempts[0].Gateway != "paywell" || u.Attempts[0].Outcome != tc.answer.Outcome || u.ChargeID != "ch_test" {
					t.Errorf("503 attempts %+v charge %q; want the one %s attempt", u.Attempts, u.ChargeID, tc.answer.Outcome)
				}
				if used := f.obs.Used(); !slices.Equal(used, []string{string(tc.op) + "/fail"}) {
					t.Errorf("fallbackLog reported %v", used)
				}
			}
		})
	}
}

func TestCaptureUnknownCharge(t *testing.T) {
	f := newOpsFixture(t)
	for name, run := range map[string]func(context.Context, string) (*payrouter.Charge, error){"capture": f.settler.Capture, "void": f.settler.Void} {
		if _, err := run(t.Context(), "ch_nope"); payrouter.Code(err) != payrouter.ENotFound {
			t.Errorf("%s of an unknown charge: %v, want not-found", name, err)
		}
	}
	if _, err := f.settler.Refund(t.Context(), "ch_nope", 0, ""); payrouter.Code(err) != payrouter.ENotFound {
		t.Errorf("refund of an unknown charge: %v, want not-found", err)
	}
	if _, err := f.settler.GetRefund(t.Context(), "", "re_nope"); payrouter.Code(err) != payrouter.ENotFound {
		t.Errorf("unknown refund: %v, want not-found", err)
	}
}

// A capture passed by its tripped breaker tells the caller to come back when the breaker
// half-opens, as a charge's 503 does; the charge breaker is no part of it.
func TestCaptureBreakerOpenRetryAfter(t *testing.T) {
	f := newOpsFixture(t, tripAfter(1))
	f.charge(t, payrouter.StatusRequiresCapture)
	f.gw.set(payrouter.OpCapture, opUnavailable)
	if _, err := f.settler.Capture(t.Context(), "ch_test"); errKind(err) != "unavailable:capture" {
		t.Fatalf("first capture: %v", err)
	}
	_, err := f.settler.Capture(t.Context(), "ch_test")
	var u *fallback.Unavailable
	if !errors.As(err, &u) || u.Attempts[0].Outcome != payrouter.OutcomeBreakerOpen {
		t.Fatalf("second capture: %v; want a 503 passed by the open breaker", err)
	}
	if u.OpenUntil.IsZero() || u.RetryAfterSeconds() < 50 {
		t.Errorf("open until %v, Retry-After %ds; want the capture breaker's cooldown", u.OpenUntil, u.RetryAfterSeconds())
	}
	if n := len(f.gw.Calls()); n != 1 {
		t.Errorf("the gateway was called %d times; the open breaker must pass it", n)
	}
	if s := f.dom.Breaker("paywell", payrouter.OpCharge).State(); s != resilience.StateClosed {
		t.Errorf("paywell/charge is %s: a capture outage must not block charges", s)
	}
}

// refundCase is a refund of the test charge (1999, at paywell), answered by the gateway.
type refundCase struct {
	name         string
	opts         []opsOption
	refunded     int64 // already refunded of the charge's 1999
	status       payrouter.ChargeStatus
	amount       int64
	answer       payrouter.Result
	wantErr      string
	wantRefund   payrouter.RefundStatus // "" when no refund is made
	wantAmount   int64
	wantRefunded int64 // the stored charge's
	wantCharge   payrouter.ChargeStatus
	wantTask     bool
	wantUsed     []string
}

var refundCases = []refundCase{
	{name: "all of it", status: payrouter.StatusSucceeded, answer: lookedUp(""),
		wantRefund: payrouter.RefundSucceeded, wantAmount: 1999, wantRefunded: 1999, wantCharge: payrouter.StatusRefunded},
	{name: "part of it", status: payrouter.StatusSucceeded, amount: 500, answer: lookedUp(""),
		wantRefund: payrouter.RefundSucceeded, wantAmount: 500, wantRefunded: 500, wantCharge: payrouter.StatusPartiallyRefunded},
	{name: "the rest of a partly refunded one", status: payrouter.StatusPartiallyRefunded, refunded: 1500, answer: lookedUp(""),
		wantRefund: payrouter.RefundSucceeded, wantAmount: 499, wantRefunded: 1999, wantCharge: payrouter.StatusRefunded},
	{name: "the rest of it", status: payrouter.StatusSucceeded, refunded: 1500, answer: lookedUp(""),
		wantRefund: payrouter.RefundSucceeded, wantAmount: 499, wantRefunded: 1999, wantCharge: payrouter.StatusRefunded},
	{name: "more than is left", status: payrouter.StatusSucceeded, refunded: 1500, amount: 500, answer: lookedUp(""),
		wantErr: string(payrouter.EState), wantRefunded: 1500, wantCharge: payrouter.StatusSucceeded},
	{name: "nothing left", status: payrouter.StatusRefunded, refunded: 1999, answer: lookedUp(""),
		wantErr: string(payrouter.EState), wantRefunded: 1999, wantCharge: payrouter.StatusRefunded},
	{name: "not captured", status: payrouter.StatusRequiresCapture, answer: lookedUp(""),
		wantErr: string(payrouter.EState), wantCharge: payrouter.StatusRequiresCapture},
	{name: "a negative amount", status: payrouter.StatusSucceeded, amount: -1, answer: lookedUp(""),
		wantErr: string(payrouter.EInvalid), wantCharge: payrouter.StatusSucceeded},
	{name: "not sent is queued", status: payrouter.StatusSucceeded, answer: opUnavailable,
		wantRefund: payrouter.RefundQueued, wantAmount: 1999, wantCharge: payrouter.StatusSucceeded, wantTask: true,
		wantUsed: []string{"refund/queue"}},
	{name: "not sent fails with fail", opts: []opsOption{withRefundFallback(fallback.Fail)}, status: payrouter.StatusSucceeded,
		answer: opUnavailable, wantErr: "unavailable:refund", wantRefund: payrouter.RefundFailed, wantAmount: 1999,
		wantCharge: payrouter.StatusSucceeded, wantUsed: []string{"refund/fail"}},
	{name: "a timeout is queued", status: payrouter.StatusSucceeded, answer: opTimeout,
		wantRefund: payrouter.RefundQueued, wantAmount: 1999, wantCharge: payrouter.StatusSucceeded, wantTask: true,
		wantUsed: []string{"refund/queue"}},
	{name: "a timeout is queued even with fail", opts: []opsOption{withRefundFallback(fallback.Fail)}, status: payrouter.StatusSucceeded,
		answer: opTimeout, wantRefund: payrouter.RefundQueued, wantAmount: 1999, wantCharge: payrouter.StatusSucceeded, wantTask: true,
		wantUsed: []string{"refund/queue"}},
	{name: "refused", status: payrouter.StatusSucceeded, answer: opDeclined, wantErr: string(payrouter.EGatewayError),
		wantRefund: payrouter.RefundFailed, wantAmount: 1999, wantCharge: payrouter.StatusSucceeded},
}

func TestRefund(t *testing.T) {
	for _, tc := range refundCases {
		t.Run(tc.name, func(t *testing.T) { checkRefund(t, tc) })
	}
}

// checkRefund runs tc and checks what the caller, the store, the queue and the observer see.
func checkRefund(t *testing.T, tc refundCase) {
	t.Helper()
	f := newOpsFixture(t, tc.opts...)
	f.charge(t, tc.status, func(c *payrouter.Charge) { c.Refunded = tc.refunded })
	f.gw.set(payrouter.OpRefund, tc.answer)
	var atCall *payrouter.Refund
	f.gw.onCall = func(payrouter.Operation) {
		// What the store holds while the gateway is called: a crash now must not lose it.
		if calls := f.gw.Calls(); len(calls) > 0 {
			atCall, _ = f.store.Refund(context.Background(), strings.TrimPrefix(calls[0], "refund:"))
		}
	}
	rf, err := f.settler.Refund(t.Context(), "ch_test", tc.amount, "")
	if got := errKind(err); got != tc.wantErr {
		t.Fatalf("err %v (%s), want %q", err, got, tc.wantErr)
	}
	calls := f.gw.Calls()
	if tc.wantRefund == "" {
		if len(calls) != 0 {
			t.Errorf("gateway called %v for a refund that cannot be", calls)
		}
	} else {
		if len(calls) != 1 || !strings.HasPrefix(calls[0], "refund:re_") {
			t.Fatalf("gateway calls %v, want one refund with the refund's reference", calls)
		}
		id := strings.TrimPrefix(calls[0], "refund:")
		if atCall == nil || atCall.Status != payrouter.RefundPending {
			t.Errorf("while sent the stored refund was %+v; want it pending", atCall)
		}
		got, err := f.store.Refund(t.Context(), id)
		if err != nil || got.Status != tc.wantRefund || got.Amount != tc.wantAmount || got.ChargeID != "ch_test" ||
			got.Reference != payrouter.RefundReference(id) || got.Gateway != "paywell" {
			t.Errorf("stored refund %+v, %v; want %s of %d", got, err, tc.wantRefund, tc.wantAmount)
		}
		if tc.wantRefund == payrouter.RefundFailed && got.Detail == "" {
			t.Error("a failed refund says nothing of why")
		}
		if err == nil && rf != nil && (rf.ID != id || rf.Status != tc.wantRefund) {
			t.Errorf("answered refund %+v, want %s %s", rf, id, tc.wantRefund)
		}
	}
	c := f.stored(t)
	if c.Status != tc.wantCharge || c.Refunded != tc.wantRefunded {
		t.Errorf("stored charge %s refunded %d; want %s %d", c.Status, c.Refunded, tc.wantCharge, tc.wantRefunded)
	}
	tasks := f.tasks(t)
	// Every stored refund has a task due once its request is over, should the process
	// die before the answer is stored; a queued one has a second, due now.
	var due []payrouter.Task
	for _, task := range tasks {
		if task.Kind != payrouter.TaskRefund || !task.NotBefore.After(f.now) {
			due = append(due, task)
		}
	}
	if got := len(due) == 1 && due[0].Kind == payrouter.TaskRefund && rf != nil && due[0].RefundID == rf.ID; got != tc.wantTask {
		t.Errorf("queued tasks %+v, want a refund task due now: %v", tasks, tc.wantTask)
	}
	if got := f.obs.Used(); !slices.Equal(got, tc.wantUsed) {
		t.Errorf("fallbackLog reported %v, want %v", got, tc.wantUsed)
	}
}

// brokenQueue takes no task.
type brokenQueue struct{ *memstore.Store }

func (brokenQueue) Enqueue(context.Context, payrouter.Task) (string, error) {
	return "", errors.New("queue down")
}

// brokenRefunds writes no refund change that queues a task (its transaction fails whole).
type brokenRefunds struct{ *memstore.Store }

func (brokenRefunds) ChangeRefund(context.Context, payrouter.RefundChange) error {
	return errors.New("database refused the write")
}

// A refund that cannot be stored with the task that finishes it is neither sent nor stored,
// and the caller is told so (and may ask again).
func TestRefundThatCannotBeStored(t *testing.T) {
	for _, answer := range []payrouter.Result{opUnavailable, opTimeout} {
		t.Run(string(answer.Outcome), func(t *testing.T) {
			f := newOpsFixture(t)
			f.settler.refunds = brokenRefunds{f.store}
			f.charge(t, payrouter.StatusSucceeded)
			f.gw.set(payrouter.OpRefund, answer)
			rf, err := f.settler.Refund(t.Context(), "ch_test", 0, "re_unqueued")
			if err == nil || rf != nil {
				t.Fatalf("got %+v, %v; want no refund and an error", rf, err)
			}
			if calls := f.gw.Calls(); len(calls) != 0 {
				t.Errorf("gateway calls %v; want none for a refund that could not be stored", calls)
			}
			if got, err := f.store.Refund(t.Context(), "re_unqueued"); !errors.Is(err, payrouter.ErrNotFound) {
				t.Errorf("stored refund %+v, %v; want none", got, err)
			}
			if tasks := f.tasks(t); len(tasks) != 0 {
				t.Errorf("queued tasks %+v; want none", tasks)
			}
			if c := f.stored(t); c.RefundsReserved != 0 {
				t.Errorf("the charge reserves %d for a refund never stored", c.RefundsReserved)
			}
		})
	}
}

// A void or recheck that cannot be queued is counted, not only logged: an approval no charge
// keeps may stay held at its gateway, and ops must be able to alert on it.
func TestReleaseThatCannotBeQueuedIsCounted(t *testing.T) {
	f := newOpsFixture(t)
	f.settler.queue = brokenQueue{f.store}
	c := f.charge(t, payrouter.StatusSucceeded)
	f.settler.ReleaseLater(t.Context(), payrouter.TaskVoid, c, "paywell", payrouter.AttemptReference(c.ID, 2), "P-stray", time.Second)
	f.settler.ReleaseLater(t.Context(), payrouter.TaskRecheck, c, "paywell", payrouter.AttemptReference(c.ID, 3), "", time.Second)
	if got := f.obs.notQueuedKinds(); !slices.Equal(got, []payrouter.TaskKind{payrouter.TaskVoid, payrouter.TaskRecheck}) {
		t.Errorf("tasks counted as not queued: %v, want [void recheck]", got)
	}
}

// TestRefundAskedAgainIsQueued is the chaos check's finding: a refund left pending by an
// instance that died after storing it, asked again by its key, gets a task of its own, so that it
// is sent (and applied once) rather than left pending for ever.
func TestRefundAskedAgainIsQueued(t *testing.T) {
	f := newOpsFixture(t)
	f.charge(t, payrouter.StatusSucceeded)
	now := time.Now().UTC()
	pending := &payrouter.Refund{ID: "re_left", ChargeID: "ch_test", Amount: 1999, Currency: "USD", Status: payrouter.RefundPending,
		Gateway: "paywell", Reference: payrouter.RefundReference("re_left"), CreatedAt: now, UpdatedAt: now}
	if err := f.store.ChangeRefund(t.Context(), payrouter.RefundChange{Refund: pending}); err != nil {
		t.Fatal(err)
	}
	rf, err := f.settler.Refund(t.Context(), "ch_test", 0, "re_left")
	if err != nil || rf.Status != payrouter.RefundPending {
		t.Fatalf("the pending refund asked again: %+v, %v; want it as it stands", rf, err)
	}
	f.work(t)
	if got, _ := f.store.Refund(t.Context(), "re_left"); got == nil || got.Status != payrouter.RefundSucceeded {
		t.Errorf("the pending refund after the worker ran: %+v; want it sent and succeeded", got)
	}
}

// work takes every task due and works it through the Service, as the worker does, acknowledging
// those done. It returns what each handling returned.
// work does one queued task as the queue's worker does (fallback.Worker): not before its
// NotBefore, by the handler of its kind.
func work(s *Service, ctx context.Context, t payrouter.Task) error {
	if s.now().Before(t.NotBefore) {
		return fallback.ErrLater
	}
	return s.Handlers()[t.Kind](ctx, t)
}

func (f *opsFixture) work(t *testing.T) []error {
	t.Helper()
	var errs []error
	for _, task := range f.tasks(t) {
		err := work(f.settler, t.Context(), task)
		if err == nil {
			if aerr := f.store.Ack(t.Context(), task.ID); aerr != nil {
				t.Fatal(aerr)
			}
		}
		errs = append(errs, err)
	}
	return errs
}

func TestQueuedRefundIsSentByTheWorker(t *testing.T) {
	cases := []struct {
		name  string
		first payrouter.Result
		// applied: the first send was applied at the gateway though its answer was lost.
		applied bool
	}{
		{"the gateway was unavailable", opUnavailable, false},
		{"the answer was lost after the gateway applied it", opTimeout, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			f.gw.appliedOnTimeout = tc.applied
			f.charge(t, payrouter.StatusSucceeded)
			f.gw.set(payrouter.OpRefund, tc.first)
			rf, err := f.settler.Refund(t.Context(), "ch_test", 700, "")
			if err != nil || rf.Status != payrouter.RefundQueued {
				t.Fatalf("refund %+v, %v; want it queued", rf, err)
			}

			// Still down: both tasks stay; the one due now is tried, the one due after the
			// request is not handed out yet.
			if errs := f.work(t); len(errs) != 1 || !errors.Is(errs[0], fallback.ErrLater) {
				t.Fatalf("worked while the gateway is down: %v; want ErrLater once", errs)
			}
			if n, _ := f.store.QueueDepth(t.Context()); n != 2 {
				t.Fatalf("queue depth %d, want the refund's tasks kept", n)
			}

			f.gw.set(payrouter.OpRefund, payrouter.Result{Outcome: payrouter.OutcomeSucceeded, GatewayReference: "gw_re"})
			f.now = f.now.Add(2 * time.Hour) // past the idle time: handed out again
			// One sends it; the other finds it done and sends nothing.
			if errs := f.work(t); len(errs) != 2 || errs[0] != nil || errs[1] != nil {
				t.Fatalf("worked with the gateway back: %v; want done", errs)
			}
			want := []string{"refund:" + rf.Reference, "refund:" + rf.Reference, "refund:" + rf.Reference}
			if got := f.gw.Calls(); !slices.Equal(got, want) {
				t.Errorf("gateway calls %v, want the same reference every time %v", got, want)
			}
			got, _ := f.store.Refund(t.Context(), rf.ID)
			if got.Status != payrouter.RefundSucceeded || got.GatewayReference != "gw_re" {
				t.Errorf("stored refund %+v, want it succeeded", got)
			}
			if c := f.stored(t); c.Refunded != 700 || c.Status != payrouter.StatusPartiallyRefunded {
				t.Errorf("charge refunded %d, status %s; want 700 counted once, partially_refunded", c.Refunded, c.Status)
			}
			if applied := f.gw.Applied(); applied != 700 {
				t.Errorf("the gateway gave back %d, want 700 once", applied)
			}
			if n, _ := f.store.QueueDepth(t.Context()); n != 0 {
				t.Errorf("queue depth %d after the refund succeeded, want 0", n)
			}

			// Handed out twice (a consumer that crashed before its Ack): nothing is sent again.
			if err := work(f.settler, t.Context(), payrouter.Task{Kind: payrouter.TaskRefund, Gateway: "paywell", ChargeID: "ch_test", RefundID: rf.ID}); err != nil {
				t.Errorf("a done refund worked again: %v", err)
			}
			if n := len(f.gw.Calls()); n != 3 {
				t.Errorf("a succeeded refund was sent again (%d calls)", n)
			}
			if c := f.stored(t); c.Refunded != 700 {
				t.Errorf("charge refunded %d after a second delivery, want 700", c.Refunded)
			}
		})
	}
}

// Two refunds of one charge completing at once both count.
func TestConcurrentRefundsBothCount(t *testing.T) {
	f := newOpsFixture(t)
	f.charge(t, payrouter.StatusSucceeded)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := f.settler.Refund(context.Background(), "ch_test", 600, ""); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if c := f.stored(t); c.Refunded != 1200 {
		t.Errorf("charge refunded %d, want 1200", c.Refunded)
	}
}

func TestWorkRefundOutcomes(t *testing.T) {
	cases := []struct {
		name      string
		status    payrouter.RefundStatus
		answer    payrouter.Result
		wantLater bool
		want      payrouter.RefundStatus
		wantCalls int
	}{
		{"applied", payrouter.RefundQueued, lookedUp(""), false, payrouter.RefundSucceeded, 1},
		{"a pending refund is sent too", payrouter.RefundPending, lookedUp(""), false, payrouter.RefundSucceeded, 1},
		{"not sent", payrouter.RefundQueued, opUnavailable, true, payrouter.RefundQueued, 1},
		{"timeout", payrouter.RefundQueued, opTimeout, true, payrouter.RefundQueued, 1},
		{"refused: failed, done", payrouter.RefundQueued, opMalformed, false, payrouter.RefundFailed, 1},
		{"declined: failed, done", payrouter.RefundQueued, opDeclined, false, payrouter.RefundFailed, 1},
		{"already failed", payrouter.RefundFailed, lookedUp(""), false, payrouter.RefundFailed, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			f.charge(t, payrouter.StatusSucceeded)
			f.gw.set(payrouter.OpRefund, tc.answer)
			rf := &payrouter.Refund{ID: "re_1", ChargeID: "ch_test", Amount: 300, Currency: "USD", Status: tc.status,
				Gateway: "paywell", Reference: payrouter.RefundReference("re_1")}
			if err := f.store.ChangeRefund(t.Context(), payrouter.RefundChange{Refund: rf}); err != nil {
				t.Fatal(err)
			}
			err := work(f.settler, t.Context(), payrouter.Task{Kind: payrouter.TaskRefund, Gateway: "paywell", ChargeID: "ch_test", RefundID: "re_1"})
			if errors.Is(err, fallback.ErrLater) != tc.wantLater || (!tc.wantLater && err != nil) {
				t.Fatalf("err %v, want later %v", err, tc.wantLater)
			}
			got, _ := f.store.Refund(t.Context(), "re_1")
			if got.Status != tc.want {
				t.Errorf("refund %s, want %s", got.Status, tc.want)
			}
			if n := len(f.gw.Calls()); n != tc.wantCalls {
				t.Errorf("%d gateway calls, want %d", n, tc.wantCalls)
			}
		})
	}
	t.Run("a refund that is not stored is dropped", func(t *testing.T) {
		f := newOpsFixture(t)
		if err := work(f.settler, t.Context(), payrouter.Task{Kind: payrouter.TaskRefund, Gateway: "paywell", RefundID: "re_gone"}); err != nil {
			t.Errorf("err %v, want nil: nothing can ever send it", err)
		}
	})
}

func TestResolveProcessing(t *testing.T) {
	old := func(c *payrouter.Charge) { c.CreatedAt = c.CreatedAt.Add(-(opsBudget + opsTimeout + time.Second)) }
	authorizeOnly := func(c *payrouter.Charge) { c.Capture = false }
	cases := []struct {
		name         string
		change       []func(*payrouter.Charge)
		lookup       payrouter.Result
		capture      payrouter.Result
		wantAnswered bool
		wantStatus   payrouter.ChargeStatus
		wantResolved payrouter.TxState
		wantCalls    []string
		wantRecheck  bool
	}{
		{name: "look-up fails", lookup: opTimeout, wantStatus: payrouter.StatusProcessing,
			wantCalls: []string{"status:ch_test-a1"}},
		{name: "look-up not sent", lookup: payrouter.Result{Outcome: payrouter.OutcomeBreakerOpen}, wantStatus: payrouter.StatusProcessing,
			wantCalls: []string{"status:ch_test-a1"}},
		{name: "captured", lookup: lookedUp(payrouter.TxCaptured), wantAnswered: true, wantStatus: payrouter.StatusSucceeded,
			wantResolved: payrouter.TxCaptured, wantCalls: []string{"status:ch_test-a1"}},
		{name: "authorized, capture asked: captured now", lookup: lookedUp(payrouter.TxAuthorized), capture: lookedUp(payrouter.TxCaptured),
			wantAnswered: true, wantStatus: payrouter.StatusSucceeded, wantResolved: payrouter.TxAuthorized,
			wantCalls: []string{"status:ch_test-a1", "capture:ch_test-a1-capture"}},
		{name: "authorized, the capture fails: stays", lookup: lookedUp(payrouter.TxAuthorized), capture: opUnavailable,
			wantAnswered: true, wantStatus: payrouter.StatusProcessing, wantResolved: payrouter.TxAuthorized,
			wantCalls: []string{"status:ch_test-a1", "capture:ch_test-a1-capture"}},
		{name: "authorized, authorize only", change: []func(*payrouter.Charge){authorizeOnly}, lookup: lookedUp(payrouter.TxAuthorized),
			wantAnswered: true, wantStatus: payrouter.StatusRequiresCapture, wantResolved: payrouter.TxAuthorized,
			wantCalls: []string{"status:ch_test-a1"}},
		{name: "declined", lookup: payrouter.Result{Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxDeclined, DeclineCode: "do_not_honor"},
			wantAnswered: true, wantStatus: payrouter.StatusDeclined, wantResolved: payrouter.TxDeclined, wantCalls: []string{"status:ch_test-a1"}},
		{name: "failed", lookup: lookedUp(payrouter.TxFailed), wantAnswered: true, wantStatus: payrouter.StatusFailed,
			wantResolved: payrouter.TxFailed, wantCalls: []string{"status:ch_test-a1"}},
		{name: "pending stays", lookup: lookedUp(payrouter.TxPending), wantAnswered: true, wantStatus: payrouter.StatusProcessing,
			wantResolved: payrouter.TxPending, wantCalls: []string{"status:ch_test-a1"}},
		{name: "not found while an attempt may be on its way: stays", lookup: lookedUp(payrouter.TxNotFound), wantAnswered: true,
			wantStatus: payrouter.StatusProcessing, wantResolved: payrouter.TxNotFound, wantCalls: []string{"status:ch_test-a1"}},
		{name: "not found once none can be: failed, rechecked later", change: []func(*payrouter.Charge){old}, lookup: lookedUp(payrouter.TxNotFound),
			wantAnswered: true, wantStatus: payrouter.StatusFailed, wantResolved: payrouter.TxNotFound,
			wantCalls: []string{"status:ch_test-a1"}, wantRecheck: true},
		{name: "never settled: nothing to ask", change: []func(*payrouter.Charge){func(c *payrouter.Charge) {
			c.Gateway, c.Reference, c.Attempts = "", "", nil
		}}, lookup: lookedUp(payrouter.TxCaptured), wantStatus: payrouter.StatusProcessing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t)
			change := append([]func(*payrouter.Charge){func(c *payrouter.Charge) {
				c.Attempts[0].Outcome = payrouter.OutcomeTimeout
			}}, tc.change...)
			c := f.charge(t, payrouter.StatusProcessing, change...)
			f.gw.set(payrouter.OpStatus, tc.lookup)
			f.gw.set(payrouter.OpCapture, tc.capture)
			answered, err := f.settler.ResolveProcessing(t.Context(), c)
			if err != nil || answered != tc.wantAnswered {
				t.Fatalf("answered %v, %v; want %v", answered, err, tc.wantAnswered)
			}
			stored := f.stored(t)
			for what, got := range map[string]*payrouter.Charge{"charge": c, "stored charge": stored} {
				if got.Status != tc.wantStatus {
					t.Errorf("%s %s, want %s", what, got.Status, tc.wantStatus)
				}
				if len(got.Attempts) > 0 && got.Attempts[0].Resolved != tc.wantResolved {
					t.Errorf("%s's attempt resolved %q, want %q", what, got.Attempts[0].Resolved, tc.wantResolved)
				}
			}
			if tc.wantStatus == payrouter.StatusDeclined && stored.DeclineCode != "do_not_honor" {
				t.Errorf("decline code %q", stored.DeclineCode)
			}
			if got := f.gw.Calls(); !slices.Equal(got, tc.wantCalls) {
				t.Errorf("gateway calls %v, want %v", got, tc.wantCalls)
			}
			tasks := f.tasks(t)
			gotRecheck := len(tasks) == 1 && tasks[0].Kind == payrouter.TaskRecheck && tasks[0].Reference == "ch_test-a1" && tasks[0].Gateway == "paywell"
			if gotRecheck != tc.wantRecheck {
				t.Errorf("queued %+v, want a recheck: %v", tasks, tc.wantRecheck)
			}
		})
	}
}

// A charge another look-up resolved meanwhile keeps that answer.
func TestResolveProcessingKeepsAnEarlierResolution(t *testing.T) {
	f := newOpsFixture(t)
	c := f.charge(t, payrouter.StatusProcessing)
	f.gw.set(payrouter.OpStatus, lookedUp(payrouter.TxPending))
	f.gw.onCall = func(payrouter.Operation) {
		done := *c
		done.Status = payrouter.StatusSucceeded
		_ = f.store.SaveCharge(context.Background(), &done)
	}
	if answered, err := f.settler.ResolveProcessing(t.Context(), c); !answered || err != nil {
		t.Fatalf("answered %v, %v", answered, err)
	}
	if c.Status != payrouter.StatusSucceeded || f.stored(t).Status != payrouter.StatusSucceeded {
		t.Errorf("charge %s, stored %s; want the earlier resolution, succeeded", c.Status, f.stored(t).Status)
	}
}

func TestRefresh(t *testing.T) {
	cases := []struct {
		name       string
		opts       []opsOption
		status     payrouter.ChargeStatus
		lookup     payrouter.Result
		wantErr    string
		wantStatus payrouter.ChargeStatus
		wantStale  bool
		wantCalls  int
		wantUsed   []string
	}{
		{name: "final: as stored, no look-up", status: payrouter.StatusSucceeded, lookup: lookedUp(payrouter.TxCaptured),
			wantStatus: payrouter.StatusSucceeded},
		{name: "processing, found captured", status: payrouter.StatusProcessing, lookup: lookedUp(payrouter.TxCaptured),
			wantStatus: payrouter.StatusSucceeded, wantCalls: 1},
		{name: "processing, found pending: not stale", status: payrouter.StatusProcessing, lookup: lookedUp(payrouter.TxPending),
			wantStatus: payrouter.StatusProcessing, wantCalls: 1},
		{name: "look-up fails: degraded to stale", status: payrouter.StatusProcessing, lookup: opUnavailable,
			wantStatus: payrouter.StatusProcessing, wantStale: true, wantCalls: 1, wantUsed: []string{"status/degrade"}},
		{name: "look-up fails with fail: 503", opts: []opsOption{withStatusFallback(fallback.Fail)}, status: payrouter.StatusProcessing,
			lookup: opTimeout, wantErr: "unavailable:status", wantCalls: 1, wantUsed: []string{"status/fail"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newOpsFixture(t, tc.opts...)
			f.charge(t, tc.status)
			f.gw.set(payrouter.OpStatus, tc.lookup)
			c, stale, err := f.settler.Refresh(t.Context(), "", "ch_test")
			if got := errKind(err); got != tc.wantErr {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
			if err == nil && (c.Status != tc.wantStatus || stale != tc.wantStale) {
				t.Errorf("got %s stale %v, want %s stale %v", c.Status, stale, tc.wantStatus, tc.wantStale)
			}
			if n := len(f.gw.Calls()); n != tc.wantCalls {
				t.Errorf("%d gateway calls, want %d", n, tc.wantCalls)
			}
			if got := f.obs.Used(); !slices.Equal(got, tc.wantUsed) {
				t.Errorf("fallbackLog reported %v, want %v", got, tc.wantUsed)
			}
		})
	}
	t.Run("unknown charge", func(t *testing.T) {
		f := newOpsFixture(t)
		if _, _, err := f.settler.Refresh(t.Context(), "", "ch_nope"); payrouter.Code(err) != payrouter.ENotFound {
			t.Errorf("err %v, want not-found", err)
		}
	})
}

// A refund asked again under the id of one already stored (its Idempotency-Key was free again:
// the instance that took it died mid-request) is answered as it stands and never sent twice, even
// when it took all that was left; the same id for another amount is a mismatch.
func TestRefundAskedAgainIsNotSentTwice(t *testing.T) {
	f := newOpsFixture(t)
	f.charge(t, payrouter.StatusSucceeded)
	first, err := f.settler.Refund(t.Context(), "ch_test", 0, "re_fromkey")
	if err != nil || first.ID != "re_fromkey" || first.Status != payrouter.RefundSucceeded {
		t.Fatalf("first refund: %+v, %v", first, err)
	}
	again, err := f.settler.Refund(t.Context(), "ch_test", 0, "re_fromkey")
	if err != nil || again.ID != "re_fromkey" || again.Status != payrouter.RefundSucceeded || again.Amount != 1999 {
		t.Errorf("asked again: %+v, %v; want the first refund as it stands", again, err)
	}
	if calls := f.gw.Calls(); len(calls) != 1 {
		t.Errorf("gateway calls %v, want the one refund", calls)
	}
	if _, err := f.settler.Refund(t.Context(), "ch_test", 500, "re_fromkey"); payrouter.Code(err) != payrouter.EMismatch {
		t.Errorf("the same id for another amount: %v, want %s", err, payrouter.EMismatch)
	}
}
