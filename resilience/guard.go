package resilience

import (
	"context"
	"time"

	"github.com/payrouter/payrouter"
)

// Guard runs the attempts of one failure domain "<gateway>/<operation>" through its breaker, its
// gateway's bulkhead and its timeout.
type Guard struct {
	gateway  string
	op       payrouter.Operation
	timeout  time.Duration
	breaker  *Breaker
	bulkhead *Bulkhead
	obs      Observer
	spanName string // "gateway <operation>", made once: not a string per call
}

// NewGuard returns a Guard over a breaker and a bulkhead (which other guards of the same gateway
// share), with a per-call timeout; obs nil is NopObserver. Domains makes them; NewGuard is for
// tests and tools.
func NewGuard(b *Breaker, bh *Bulkhead, timeout time.Duration, obs Observer) *Guard {
	if obs == nil {
		obs = NopObserver{}
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Guard{gateway: b.gateway, op: b.op, timeout: timeout, breaker: b, bulkhead: bh, obs: obs,
		spanName: "gateway " + string(b.op)}
}

// Gateway returns the guarded gateway's name.
func (g *Guard) Gateway() string { return g.gateway }

// Operation returns the guarded operation.
func (g *Guard) Operation() payrouter.Operation { return g.op }

// Breaker returns the failure domain's breaker.
func (g *Guard) Breaker() *Breaker { return g.breaker }

// Bulkhead returns the gateway's bulkhead.
func (g *Guard) Bulkhead() *Bulkhead { return g.bulkhead }

// Timeout returns the per-call timeout of the operation.
func (g *Guard) Timeout() time.Duration { return g.timeout }

// Details of the results of refused attempts.
const (
	detailBreakerOpen  = "circuit breaker open: the gateway was not called"
	detailBulkheadFull = "no bulkhead slot free in time: the gateway was not called"
	detailKeyShare     = "this API key holds its share of the gateway's bulkhead slots: the gateway was not called"
)

// Do runs one attempt in the order breaker(bulkhead(timeout(call))): breaker admission with no
// network call; a bulkhead slot (no wait beyond MaxWait); a context deadline of min(timeout, what
// is left of ctx); the call; the outcome reported to the breaker; the slot released. When refused
// it returns a Result with Outcome breaker_open or bulkhead_full and never calls call. It returns
// the call's duration (0 when refused).
//
// The Result is the call's own. A failure while ctx had ended (its deadline was shorter than the
// timeout and expired, or it was cancelled) is still returned as it is, since the gateway may have
// acted, but it is not counted against the breaker: the gateway was not given its full timeout.
//
// Every attempt, refused ones included, is a client span "gateway <operation>" (attempt.go), a
// child of the span in ctx; call runs in the span's context, so the gateway's request carries it.
func (g *Guard) Do(ctx context.Context, call func(ctx context.Context) payrouter.Result) (res payrouter.Result, d time.Duration) {
	res, d, _ = g.Send(ctx, nil, call)
	return res, d
}

// Send is Do with a last word before the call: before, when set, runs once the guard admitted
// the call (breaker and bulkhead), just before it is made, and false abandons it. Nothing is
// then sent, counted or reported (CallDone): the breaker's admission is handed back, and the
// answer is an error "not sent" with no duration. called says whether call ran: the one word
// on whether the gateway was asked, which a refused or abandoned call never was.
func (g *Guard) Send(ctx context.Context, before func(context.Context) bool, call func(ctx context.Context) payrouter.Result) (res payrouter.Result, d time.Duration, called bool) {
	ctx, span := g.startSpan(ctx)
	defer func() { g.endSpan(ctx, span, res.Outcome) }()
	adm, err := g.breaker.allow()
	if err != nil {
		g.obs.CallDone(ctx, g.gateway, g.op, payrouter.OutcomeBreakerOpen, 0)
		return payrouter.Result{Outcome: payrouter.OutcomeBreakerOpen, Detail: detailBreakerOpen}, 0, false
	}
	scope, ok, overShare := g.bulkhead.acquire(ctx)
	if !ok {
		g.breaker.finish(adm, reportOf(payrouter.OutcomeBulkheadFull)) // excluded: hands a half-open trial back
		g.obs.CallDone(ctx, g.gateway, g.op, payrouter.OutcomeBulkheadFull, 0)
		detail := detailBulkheadFull
		if overShare {
			detail = detailKeyShare
		}
		return payrouter.Result{Outcome: payrouter.OutcomeBulkheadFull, Detail: detail}, 0, false
	}
	return g.run(ctx, before, call, adm, scope)
}

// notSent is the answer to a call its before abandoned.
var notSent = payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "not sent: the charge could not be stored or was refused"}

// run is the part of Do that holds a slot (counted against scope's share, "" none) and the
// breaker's admission.
func (g *Guard) run(ctx context.Context, before func(context.Context) bool, call func(context.Context) payrouter.Result, adm admission, scope string) (payrouter.Result, time.Duration, bool) {
	reported := false
	defer func() {
		if !reported {
			// call panicked: a half-open trial never reported would hold its place for good.
			g.breaker.finish(adm, errAbandoned)
		}
		g.bulkhead.releaseFor(scope)
	}()

	// When what is left of ctx is shorter than the timeout, ctx already carries the deadline we
	// want: no context of our own (and none of its allocations).
	callCtx, budgetFirst := ctx, false
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < g.timeout {
		budgetFirst = true
	} else {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}

	if before != nil && !before(callCtx) {
		g.breaker.finish(adm, reportOf(notSent.Outcome)) // excluded: a trial is handed back, nothing counted
		reported = true
		return notSent, 0, false
	}
	start := time.Now()
	res := call(callCtx)
	d := time.Since(start)

	report := reportOf(res.Outcome)
	if res.Outcome.IsFailure() && callerEnded(ctx, budgetFirst) {
		report = &outcomeError{outcome: res.Outcome, callerGone: true}
	}
	g.breaker.finish(adm, report)
	reported = true
	g.obs.CallDone(ctx, g.gateway, g.op, res.Outcome, d)
	return res, d, true
}

// callerEnded reports whether the caller's ctx, not the gateway's timeout, ended the call: it was
// cancelled, or its deadline came before the timeout would have and has passed.
func callerEnded(ctx context.Context, budgetFirst bool) bool {
	switch ctx.Err() {
	case nil:
		return false
	case context.DeadlineExceeded:
		return budgetFirst
	default:
		return true
	}
}
