package routing

import (
	"context"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/resilience"
)

// Gateways is what one configuration calls gateways with: their adapters by name (those of
// retired gateways too, for the charges they hold) and the failure domains they run under. A
// reload makes a new one; a charge, and each operation after it, takes one and makes every call
// through it, so that a reload under way never mixes two configurations in one of them.
type Gateways struct {
	Adapters map[string]payrouter.Gateway
	Domains  *resilience.DomainSet
}

// Has reports whether gateway can be called: it has an adapter and a failure domain.
func (g *Gateways) Has(gateway string) bool {
	return g.Adapters[gateway] != nil && g.Domains.Guard(gateway, payrouter.OpStatus) != nil
}

// Call is a call of op at gateway through its guard in g, with reference ref; send asks the
// gateway.
func (g *Gateways) Call(gateway string, op payrouter.Operation, ref string, send func(context.Context) payrouter.Result) Call {
	return Call{Gateway: gateway, Op: op, Guard: g.Domains.Guard(gateway, op), Ref: ref, Send: send}
}

// Timeout is the timeout of one operation of a gateway.
func (g *Gateways) Timeout(gateway string, op payrouter.Operation) time.Duration {
	s, _ := g.Domains.Settings(gateway)
	return s.TimeoutFor(op)
}

// OpenUntil returns when op's breaker at a gateway reopens (zero when not open by a trip), for
// fallback.NewUnavailable.
func (g *Gateways) OpenUntil(op payrouter.Operation) func(gateway string) time.Time {
	return func(gateway string) time.Time {
		if b := g.Domains.Breaker(gateway, op); b != nil {
			return b.OpenUntil()
		}
		return time.Time{}
	}
}

// Call is one call of an operation at one gateway: through the gateway's guard for that
// operation, with the idempotency reference the gateway applies once. Every gateway call of
// routing and payments is a Call, run by Do.
type Call struct {
	Gateway string
	Op      payrouter.Operation
	Guard   *resilience.Guard
	// Ref is the reference sent: payrouter.AttemptReference for a charge attempt,
	// payrouter.OperationReference for what follows on it, payrouter.RefundReference for a
	// refund.
	Ref string
	// Attempt numbers a charge attempt (1-based) for its trace, Hedge saying whether it is a
	// hedge (resilience.WithAttempt); 0 for any other call.
	Attempt int
	Hedge   bool
	// Before, when set, runs once the guard admitted the call, just before the gateway is
	// asked; false abandons the call: nothing is sent (the charge could not be stored).
	Before func(context.Context) bool
	// Send asks the gateway.
	Send func(context.Context) payrouter.Result
}

// Result is what a Call came to.
type Result struct {
	payrouter.Result
	Duration time.Duration
	Gateway  string
	Ref      string
	// Called is true when the gateway was asked: neither refused by its breaker or bulkhead
	// nor abandoned by Before.
	Called bool
}

// Do runs the call through its guard (resilience.Guard.Send).
func (c Call) Do(ctx context.Context) Result {
	if c.Attempt > 0 {
		ctx = resilience.WithAttempt(ctx, c.Attempt, c.Hedge)
	}
	res, d, called := c.Guard.Send(ctx, c.Before, c.Send)
	return Result{Result: res, Duration: d, Gateway: c.Gateway, Ref: c.Ref, Called: called}
}

// Attempt is the call's record in its charge: the reference only when the gateway was called.
func (r Result) Attempt() payrouter.Attempt {
	a := payrouter.Attempt{Gateway: r.Gateway, Outcome: r.Outcome, Duration: r.Duration}
	if r.Called {
		a.Reference = r.Ref
	}
	return a
}
