// Package resilience guards every call payrouter makes to a gateway. Each failure domain
// "<gateway>/<operation>" has its own circuit breaker; each gateway has its own bulkhead and its
// own http.Client, so a slow or failing gateway (or a failing operation of one) can only use up
// what is its own.
//
// One attempt runs as breaker(bulkhead(timeout(call))), written once in Guard.Do: the breaker
// answers first because refusing costs nothing, not even a slot; the bulkhead bounds how many
// calls wait on the gateway at once; the timeout bounds how long each of them waits.
//
// The breaker's state machine is gobreaker v2's TwoStepCircuitBreaker. What counts as a failure
// is payrouter.Outcome's rules (docs/architecture.md, Outcomes are the heart): succeeded, declined
// and pending are successes, unavailable, timeout and unknown are failures, and everything else
// is left out of the counts.
package resilience

import (
	"context"
	"errors"
	"time"

	"github.com/payrouter/payrouter"
)

// State is the state of a breaker, named as the admin API and the metrics name it.
type State string

// The states of a breaker.
const (
	StateClosed   State = "closed"
	StateOpen     State = "open"
	StateHalfOpen State = "half_open"
)

// ErrOpen is returned by Breaker.Allow when the breaker refuses a call: it is open, forced open,
// or half-open with all its trial calls already taken.
var ErrOpen = errors.New("resilience: circuit breaker open")

// Observer hears what the guards do; telemetry implements it with Prometheus.
//
// Calls must be cheap and must not call back into this package: BreakerTransition is called with
// the breaker's locks held, so that transitions are heard in the order they happened (a gauge set
// from them then always ends on the true state).
type Observer interface {
	// BreakerTransition reports a change of the state a breaker shows (forcing included). from is
	// always the to of the previous report for that breaker (closed before the first). counts are
	// those of the period that ended: for closed→open the counts that tripped it. cooldown is
	// the breaker's own (BreakerSettings.Cooldown), so a report never names another
	// configuration's.
	BreakerTransition(gateway string, op payrouter.Operation, from, to State, counts Counts, cooldown time.Duration)
	// BreakerForced reports a change of what ops imposed on a breaker (payrouter.ForcedOpen,
	// ForcedClosed, or ForcedNone when forcing is cleared), on this instance or shared by the
	// fleet, in the order of the changes. A breaker forced closed shows the state closed, one
	// forced open the state open: this is what tells them from the breaker's own.
	BreakerForced(gateway string, op payrouter.Operation, forced payrouter.Forced)
	// BreakerRejected reports a call refused by a breaker.
	BreakerRejected(gateway string, op payrouter.Operation)
	// CallDone reports every attempt Guard.Do made, refused ones included (breaker_open and
	// bulkhead_full, with d 0). ctx holds the attempt's span: a duration observed with it can
	// name its trace (an exemplar).
	CallDone(ctx context.Context, gateway string, op payrouter.Operation, outcome payrouter.Outcome, d time.Duration)
	// BulkheadChanged reports a bulkhead's calls in flight after each acquire and release.
	BulkheadChanged(gateway string, inFlight, capacity int)
	// BulkheadRejected reports a call refused for want of a bulkhead slot.
	BulkheadRejected(gateway string)
	// ProbeDone reports one out-of-band probe of a gateway's health endpoint.
	ProbeDone(gateway string, healthy bool, d time.Duration)
}

// NopObserver is an Observer that does nothing.
type NopObserver struct{}

// BreakerTransition does nothing.
func (NopObserver) BreakerTransition(string, payrouter.Operation, State, State, Counts, time.Duration) {
}

// BreakerForced does nothing.
func (NopObserver) BreakerForced(string, payrouter.Operation, payrouter.Forced) {}

// BreakerRejected does nothing.
func (NopObserver) BreakerRejected(string, payrouter.Operation) {}

// CallDone does nothing.
func (NopObserver) CallDone(context.Context, string, payrouter.Operation, payrouter.Outcome, time.Duration) {
}

// BulkheadChanged does nothing.
func (NopObserver) BulkheadChanged(string, int, int) {}

// BulkheadRejected does nothing.
func (NopObserver) BulkheadRejected(string) {}

// ProbeDone does nothing.
func (NopObserver) ProbeDone(string, bool, time.Duration) {}

// outcomeError carries an attempt's outcome through gobreaker's done(err) to IsSuccessful and
// IsExcluded, so that the outcome rules live in one place (classify) and nowhere in gobreaker's
// settings.
type outcomeError struct {
	outcome payrouter.Outcome
	// callerGone marks a failure the caller caused: its budget ran out before the gateway's own
	// timeout, or it went away. The gateway was not given its full chance, so it is not counted.
	callerGone bool
}

func (e *outcomeError) Error() string {
	if e.callerGone {
		return "resilience: outcome " + string(e.outcome) + " after the caller's context ended"
	}
	return "resilience: outcome " + string(e.outcome)
}

// verdict is what one outcome does to a breaker's counts.
type verdict int

const (
	countedSuccess verdict = iota
	countedFailure
	excluded
)

// classify holds the outcome rules (docs/architecture.md, Outcomes are the heart). An outcome no
// adapter should produce is excluded: a bug of ours says nothing of the gateway's health.
func classify(o payrouter.Outcome) verdict {
	switch {
	case o == payrouter.OutcomeSucceeded || o == payrouter.OutcomeDeclined || o == payrouter.OutcomePending:
		return countedSuccess
	case o.IsFailure():
		return countedFailure
	default:
		return excluded
	}
}

// verdictOf reads the error given to gobreaker's done. nil is a success (gobreaker's own
// convention); any other error not ours (none is expected) is excluded rather than blamed on
// the gateway.
func verdictOf(err error) verdict {
	if err == nil {
		return countedSuccess
	}
	e, ok := err.(*outcomeError)
	if !ok || e.callerGone {
		return excluded
	}
	return classify(e.outcome)
}

// knownOutcomes holds one report per outcome, so that reporting an outcome allocates nothing.
var knownOutcomes = [...]outcomeError{
	{outcome: payrouter.OutcomeSucceeded},
	{outcome: payrouter.OutcomeDeclined},
	{outcome: payrouter.OutcomePending},
	{outcome: payrouter.OutcomeUnavailable},
	{outcome: payrouter.OutcomeTimeout},
	{outcome: payrouter.OutcomeUnknown},
	{outcome: payrouter.OutcomeError},
	{outcome: payrouter.OutcomeBreakerOpen},
	{outcome: payrouter.OutcomeBulkheadFull},
}

// reportOf returns the error that tells gobreaker's done about outcome o.
func reportOf(o payrouter.Outcome) error {
	for i := range knownOutcomes {
		if knownOutcomes[i].outcome == o {
			return &knownOutcomes[i]
		}
	}
	return &outcomeError{outcome: o}
}

// errAbandoned is reported for a call that never returned an outcome (it panicked): its trial
// or count must be handed back, and a panic is our bug, not the gateway's health.
var errAbandoned = errors.New("resilience: call abandoned without an outcome")
