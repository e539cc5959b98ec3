package fallback

import (
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
)

// Observer is told each time a fallback answers an operation (payrouter_fallbacks_total).
type Observer interface {
	FallbackUsed(op payrouter.Operation, policy Policy)
}

// Missed is what the caller of an operation knows once no gateway took it.
type Missed struct {
	// ChargeID is the charge the operation is about; "" for a charge that was never stored.
	ChargeID string
	// Attempts are the calls made, the last one deciding; none when no gateway could be asked.
	Attempts []payrouter.Attempt
	// OpenUntil tells when the operation's breaker at a gateway reopens (zero when it is not open
	// by a trip); nil: never known.
	OpenUntil func(gateway string) time.Time
}

// last is the outcome of the last attempt, "" when none was made.
func (m Missed) last() payrouter.Outcome {
	if n := len(m.Attempts); n > 0 {
		return m.Attempts[n-1].Outcome
	}
	return ""
}

// Fallbacks decides, under the policies in use, what each operation answers once no gateway took
// it. Its methods are the only place that reads a policy; each is named for its operation.
type Fallbacks struct {
	Settings Settings
	// Observer is told which fallback answered; nil: nobody.
	Observer Observer
	// Now is the clock Retry-After is counted from; nil: time.Now.
	Now func() time.Time
}

func (f Fallbacks) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

func (f Fallbacks) used(op payrouter.Operation, p Policy) {
	if f.Observer != nil {
		f.Observer.FallbackUsed(op, p)
	}
}

// fail is the Fail answer of op, counted.
func (f Fallbacks) fail(op payrouter.Operation, m Missed) *Unavailable {
	f.used(op, Fail)
	return f.unavailable(op, m)
}

func (f Fallbacks) unavailable(op payrouter.Operation, m Missed) *Unavailable {
	openUntil := m.OpenUntil
	if openUntil == nil {
		openUntil = func(string) time.Time { return time.Time{} }
	}
	return NewUnavailable(op, m.ChargeID, m.Attempts, openUntil, f.now())
}

// Charge is the fallback of a charge no candidate gateway took: Fail, the only policy. It is not
// counted here: the API counts the 503 it answers, since a charge failed fast (routing's
// FastFail) may still be answered by the replay of its Idempotency-Key.
func (f Fallbacks) Charge(m Missed) *Unavailable {
	return f.unavailable(payrouter.OpCharge, m)
}

// Capture is the fallback of a capture its gateway did not take, or whose answer was lost with no
// look-up to tell: Fail. The caller sends the same capture again after Retry-After, which the
// operation's reference makes safe.
func (f Fallbacks) Capture(m Missed) error { return f.fail(payrouter.OpCapture, m) }

// Void is the fallback of a void its gateway did not take, or whose answer was lost with no
// look-up to tell: Fail, as Capture.
func (f Fallbacks) Void(m Missed) error { return f.fail(payrouter.OpVoid, m) }

// Status is the fallback of the look-up of a processing charge, stored, whose gateway could not
// answer. Degrade answers the stored charge, stale; Fail answers an *Unavailable.
func (f Fallbacks) Status(m Missed, stored *payrouter.Charge) (c *payrouter.Charge, stale bool, err error) {
	if f.Settings.Policy(payrouter.OpStatus) == Fail {
		return nil, false, f.fail(payrouter.OpStatus, m)
	}
	f.used(payrouter.OpStatus, Degrade)
	return stored, true, nil
}

// RefundSteps are what the refund fallback does to a refund; the refund's owner (payments) gives
// them.
type RefundSteps struct {
	// Queue keeps the refund durably: stored queued, and a task in the store's queue that a
	// Worker drains, sending it again with the same reference until the gateway answers.
	// maybeSent says the gateway may have applied it. An error when it could not be queued: the
	// refund is then as it was, and never answered queued.
	Queue func(maybeSent bool) error
	// Fail records the refund failed, with why: it is never sent again.
	Fail func(detail string)
}

// Refund is the fallback of a refund, stored pending, that its gateway did not take: m's last
// attempt says whether it was not sent (unavailable, breaker_open, bulkhead_full) or may have
// been applied (timeout, unknown, pending). It returns rf queued, or an error.
//
// A refund the gateway may have applied is queued whatever the policy: failing it would tell the
// caller the money did not move when it may have, and a new refund could then give it back twice.
// Sent again with the same reference, it is applied once. Should it not be queued, the error is
// not an *Unavailable (the caller must not think nothing moved) and the refund stays pending.
//
// A refund not sent is queued under Queue; should the queue refuse it, or the policy be Fail, it
// is failed (nothing moved, so failing it is honest) and the answer is an *Unavailable.
func (f Fallbacks) Refund(m Missed, rf *payrouter.Refund, steps RefundSteps) (*payrouter.Refund, error) {
	if o := m.last(); o.MayHaveBeenApplied() {
		if err := steps.Queue(true); err != nil {
			return nil, fmt.Errorf("refund %s of charge %s: %s at the gateway, and not queued: %w", rf.ID, rf.ChargeID, o, err)
		}
		f.used(payrouter.OpRefund, Queue)
		return rf, nil
	}
	if f.Settings.Policy(payrouter.OpRefund) != Queue {
		steps.Fail("not sent: " + string(m.last()))
		return nil, f.fail(payrouter.OpRefund, m)
	}
	if err := steps.Queue(false); err != nil {
		steps.Fail("not sent, and could not be queued")
		return nil, f.fail(payrouter.OpRefund, m)
	}
	f.used(payrouter.OpRefund, Queue)
	return rf, nil
}
