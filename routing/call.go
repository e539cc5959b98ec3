package routing

import (
	"context"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// gatewayCall is one call of an operation at one gateway: through the gateway's guard for that
// operation (from the table the charge or operation runs on), with the idempotency reference the
// gateway applies once. Every gateway call routing makes is a gatewayCall, run by do.
type gatewayCall struct {
	gateway string
	op      payrouter.Operation
	guard   *resilience.Guard
	// ref is the reference sent: payrouter.AttemptReference for a charge attempt,
	// payrouter.OperationReference for what follows on it, payrouter.RefundReference for a
	// refund.
	ref string
	// attempt numbers a charge attempt (1-based) for its trace, hedge saying whether it is a
	// hedge (resilience.WithAttempt); 0 for any other call.
	attempt int
	hedge   bool
	// before, when set, runs once the guard admitted the call, just before the gateway is
	// asked; false abandons the call: nothing is sent (the charge could not be stored).
	before func(context.Context) bool
	// send asks the gateway.
	send func(context.Context) payrouter.Result
}

// callResult is what a gatewayCall came to.
type callResult struct {
	payrouter.Result
	d       time.Duration
	gateway string
	ref     string
	// called is true when the gateway was asked: neither refused by its breaker or bulkhead nor
	// abandoned by before.
	called bool
}

// notCalled is the result of a call abandoned before the gateway was reached: excluded from the
// breaker's counts like any malformed request of ours.
var notCalled = payrouter.Result{Outcome: payrouter.OutcomeError, Detail: "not sent: the charge could not be stored or was refused"}

// do runs the call through its guard.
func (c gatewayCall) do(ctx context.Context) callResult {
	if c.attempt > 0 {
		ctx = resilience.WithAttempt(ctx, c.attempt, c.hedge)
	}
	called := false // the guard runs its function on this goroutine, or not at all
	res, d := c.guard.Do(ctx, func(ctx context.Context) payrouter.Result {
		if c.before != nil && !c.before(ctx) {
			return notCalled
		}
		called = true
		return c.send(ctx)
	})
	return callResult{Result: res, d: d, gateway: c.gateway, ref: c.ref, called: called}
}

// attempt is the call's record in its charge: the reference only when the gateway was called.
func (r callResult) attempt() payrouter.Attempt {
	a := payrouter.Attempt{Gateway: r.gateway, Outcome: r.Outcome, Duration: r.d}
	if r.called {
		a.Reference = r.ref
	}
	return a
}

// call is a call of op at gateway through t's guard, with reference ref.
func (t *table) call(gateway string, op payrouter.Operation, ref string, send func(context.Context) payrouter.Result) gatewayCall {
	return gatewayCall{gateway: gateway, op: op, guard: t.set.Guard(gateway, op), ref: ref, send: send}
}
