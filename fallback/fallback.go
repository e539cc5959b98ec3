// Package fallback decides what an operation answers when no gateway can take it: fail honestly
// (503 with Retry-After), degrade to what is known, or queue for later.
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
