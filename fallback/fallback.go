// Package fallback decides what an operation answers when no gateway can take it (its breaker
// open, its bulkhead full, the gateway unavailable, or its answer lost), and drains what it
// queued. Settings is the `fallbacks:` section of the configuration (docs/configuration.md);
// Fallbacks has one method per operation, the only code that reads a policy. Fail is an
// *Unavailable, which the API answers as 503 gateways-unavailable with Retry-After (the
// earliest reopening of a breaker that refused the call, else 1s), the attempts and open_until.
//
//	operation  policy     when no gateway can take it, the caller gets
//	---------  ---------  -------------------------------------------------------------------
//	charge     fail       503 (Fallbacks.Charge). Never queued, never degraded: the caller must
//	           (only)     know at once that no money moved. The charge is stored, failed, only
//	                      when a gateway was called; a charge every breaker refuses writes
//	                      nothing (routing's FastFail).
//	capture    fail       503 (Fallbacks.Capture), with the capture breaker's open_until; also
//	           (only)     when its answer was lost and a look-up cannot tell. Sending it again
//	                      is safe: its reference makes a repeat a no-op.
//	void       fail       503 (Fallbacks.Void), as capture.
//	           (only)
//	refund     queue      202, the refund queued (Fallbacks.Refund): stored queued, with a task
//	           (default)  in the store's queue that a Worker drains, sending it again with the
//	                      same reference until the gateway answers. Should the queue refuse
//	                      it: the refund is failed (nothing moved) and the answer is 503.
//	           fail       503; the refund is failed, never sent again.
//	           either     A refund the gateway may have applied (timeout, unknown, pending) is
//	                      queued, 202, whatever the policy. Should the queue refuse it, it stays
//	                      pending (the task queued before it was first sent finishes it) and
//	                      the answer is the store's error, never a 503 that says nothing moved.
//	status     degrade    GET /charge/{id} of a processing charge whose gateway cannot be
//	           (default)  asked: the stored charge, "stale": true (Fallbacks.Status).
//	           fail       503.
//
// Each use of a fallback is counted (payrouter_fallbacks_total), a charge's by the API that
// answers it. Worker drains the queue: the refunds queued here and the voids and rechecks
// package payments queues; a task that cannot be done now (ErrLater) stays for later.
package fallback

import (
	"errors"
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
)

// Policy is one operation's fallback, as `fallbacks:` configures it.
type Policy string

// The fallback policies.
const (
	Fail    Policy = "fail"    // an honest 503 with Retry-After
	Queue   Policy = "queue"   // 202, kept durably, sent later
	Degrade Policy = "degrade" // the last known answer, marked stale
)

// MinRetryAfter is the shortest Retry-After payrouter answers: HTTP counts it in whole seconds.
const MinRetryAfter = time.Second

// Unavailable is the answer of an operation whose fallback is Fail: no candidate gateway could
// take it. The API shows it as 503 gateways-unavailable.
type Unavailable struct {
	Operation payrouter.Operation
	ChargeID  string
	Attempts  []payrouter.Attempt
	// OpenUntil is the earliest moment one of the passed breakers reopens; zero when none was open.
	OpenUntil time.Time
	// RetryAfter is how long the caller should wait before sending the same request again.
	RetryAfter time.Duration
}

func (u *Unavailable) Error() string {
	return fmt.Sprintf("%s: no gateway could take it (%d attempts)", u.Operation, len(u.Attempts))
}

// ErrorCode makes Unavailable a payrouter.Coded error: payrouter.Code of it, or of any error
// wrapping it, is EGatewaysUnavailable, never internal.
func (u *Unavailable) ErrorCode() payrouter.ErrorCode { return payrouter.EGatewaysUnavailable }

// SafeMessage is what the caller is told (payrouter.Message).
func (u *Unavailable) SafeMessage() string {
	return "every candidate gateway is open, full or unavailable; send the same request again after Retry-After"
}

var _ payrouter.Coded = (*Unavailable)(nil)

// NewUnavailable builds the Fail answer from the attempts made. openUntil tells when the breaker
// of a gateway passed as breaker_open reopens (zero if unknown or forced open). The caller is told
// to come back when the first breaker half-opens, or after MinRetryAfter when nothing better is
// known (a full bulkhead or a gateway that said "later" frees up at any moment).
func NewUnavailable(op payrouter.Operation, chargeID string, attempts []payrouter.Attempt, openUntil func(gateway string) time.Time, now time.Time) *Unavailable {
	u := &Unavailable{Operation: op, ChargeID: chargeID, Attempts: attempts, RetryAfter: MinRetryAfter}
	for _, a := range attempts {
		if a.Outcome != payrouter.OutcomeBreakerOpen {
			continue
		}
		if t := openUntil(a.Gateway); !t.IsZero() && (u.OpenUntil.IsZero() || t.Before(u.OpenUntil)) {
			u.OpenUntil = t
		}
	}
	if !u.OpenUntil.IsZero() {
		if wait := u.OpenUntil.Sub(now); wait > u.RetryAfter {
			u.RetryAfter = wait
		}
	}
	return u
}

// RetryAfterSeconds is RetryAfter as the Retry-After header carries it: whole seconds, rounded
// up, at least 1.
func (u *Unavailable) RetryAfterSeconds() int {
	s := int((u.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

// ErrLater is what a queued task's handler returns when the task cannot be done now (its
// gateway's breaker is open, the gateway does not answer, it is not due yet): the task stays in
// the queue and is handed out again later.
var ErrLater = errors.New("not done now: left in the queue for later")

// ErrHandedOff is what a handler returns when it took the task in hand itself: it moved it in
// the queue (put it back for later, or among the dead letters), or goes on with it in the
// background and will acknowledge or move it when done. The worker neither acknowledges it nor
// logs it, and never waits for it: a webhook endpoint that hangs holds its own slots, not the
// worker (package webhooks).
var ErrHandedOff = errors.New("handed off: the handler moves the task itself")
