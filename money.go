package payrouter

import (
	"crypto/rand"
	"encoding/base32"
	"time"
)

// The money rules (docs/architecture.md, One owner for a charge's life). Each is a change of one
// charge computed here, on the charge as its store last returned it, and written by the store
// only while the stored charge is still at that version (ChargeStore.SaveCharge,
// RefundStore.ChangeRefund): two instances, a stalled holder that resumes and the queue worker
// all meet the same check, and whoever comes second reads the charge again and is judged on
// what it finds.

// Refundable reports whether a charge in status s has captured money that may be given back.
func (s ChargeStatus) Refundable() bool {
	return s == StatusSucceeded || s == StatusPartiallyRefunded
}

// RefundLeft is what may still be refunded of c: what it captured, less what was refunded and
// what refunds sent or queued have reserved.
func (c *Charge) RefundLeft() int64 { return c.Amount - c.Refunded - c.RefundsReserved }

// ReserveRefund reserves amount of c (0: all that is left) for a refund about to be sent or
// queued, and returns the amount reserved. EState when c holds no captured money or amount does
// not fit what is left: nothing is reserved, and nothing may be sent.
func (c *Charge) ReserveRefund(amount int64) (int64, error) {
	left := c.RefundLeft()
	switch {
	case !c.Status.Refundable():
		return 0, Errorf(EState, "charge %s is %s: only a succeeded charge can be refunded", c.ID, c.Status)
	case c.CaptureQueued:
		// Answered succeeded with its capture queued: a refund sent before the capture would be
		// refused by the gateway (nothing captured yet) or, worse, outrun it.
		return 0, Errorf(EState, "charge %s is still being captured: send the refund again in a few seconds", c.ID)
	case left <= 0:
		return 0, Errorf(EState, "charge %s has nothing left to refund (refunded %d, %d in refunds not answered yet)", c.ID, c.Refunded, c.RefundsReserved)
	case amount > left:
		return 0, Errorf(EState, "charge %s has %d left to refund (refunded %d, %d in refunds not answered yet), less than %d", c.ID, left, c.Refunded, c.RefundsReserved, amount)
	case amount == 0:
		amount = left
	}
	c.RefundsReserved += amount
	return amount, nil
}

// Fits reports whether c's refunds, applied and reserved, fit what it captured, or at least
// grow no further than those of was, the charge as stored before (one written before these rules
// held may be over already): the stores refuse a write of c otherwise, whatever computed it.
func (c *Charge) Fits(was *Charge) bool {
	sum := c.Refunded + c.RefundsReserved
	if c.Refunded < 0 || c.RefundsReserved < 0 {
		return false
	}
	return sum <= c.Amount || was != nil && sum <= was.Refunded+was.RefundsReserved
}

// RefundApplied moves a refund of amount the gateway applied from c's reservations to what it
// refunded. It is written with the refund's own move to succeeded, from pending or queued, so
// it is counted once however often its completion runs.
func (c *Charge) RefundApplied(amount int64) {
	// A refund reserved nothing when it was made before reservations were kept.
	c.RefundsReserved = max(0, c.RefundsReserved-amount)
	c.Refunded += amount
	c.Status = StatusPartiallyRefunded
	if c.Refunded >= c.Amount {
		c.Status = StatusRefunded
	}
}

// RefundReleased frees the reservation of a refund of amount that the gateway refused.
func (c *Charge) RefundReleased(amount int64) {
	c.RefundsReserved = max(0, c.RefundsReserved-amount)
}

// BeginChange marks c, an authorization, as having op (capture or void) sent to its gateway at
// now, before it is sent: a second request for the same op goes ahead (its reference makes a
// repeat a no-op at the gateway), the opposite op is refused with EState until the first is
// answered or stale (a mark older than stale is one whose instance died mid-call). EState too
// when c is no authorization.
func (c *Charge) BeginChange(op Operation, now time.Time, stale time.Duration) error {
	if c.Status != StatusRequiresCapture {
		return Errorf(EState, "charge %s is %s: only a requires_capture charge can be %s", c.ID, c.Status, pastTense(op))
	}
	if c.Changing != "" && c.Changing != op && now.Sub(c.ChangingSince) < stale {
		return Errorf(EState, "charge %s is being %s: it cannot be %s at the same time", c.ID, pastTense(c.Changing), pastTense(op))
	}
	c.Changing, c.ChangingSince = op, now
	return nil
}

// EndChange records that the change BeginChange marked came to status (or, "", to nothing: the
// gateway did not take it, and the authorization stands).
func (c *Charge) EndChange(status ChargeStatus) {
	c.Changing, c.ChangingSince = "", time.Time{}
	if status != "" {
		c.Status = status
	}
}

func pastTense(op Operation) string {
	switch op {
	case OpCapture:
		return "captured"
	case OpVoid:
		return "voided"
	}
	return string(op) + "ed"
}

// EventType says what changed in an Event (docs/api.md, GET /events).
type EventType string

// The event types. A charge captured at once has charge.succeeded; an authorization has
// charge.requires_capture, then charge.captured or charge.voided. Every refund the gateway
// applied is refund.succeeded (the refund) and charge.refunded (its charge, with its refunded
// amount).
const (
	EventChargeSucceeded       EventType = "charge.succeeded"
	EventChargeDeclined        EventType = "charge.declined"
	EventChargeFailed          EventType = "charge.failed"
	EventChargeRequiresCapture EventType = "charge.requires_capture"
	EventChargeCaptured        EventType = "charge.captured"
	EventChargeVoided          EventType = "charge.voided"
	// EventChargeCaptureFailed: a charge answered succeeded with its capture queued
	// (Charge.CaptureQueued) whose gateway refused the capture; the charge is now failed and
	// its authorization released.
	EventChargeCaptureFailed EventType = "charge.capture_failed"
	EventChargeRefunded      EventType = "charge.refunded"
	EventRefundSucceeded     EventType = "refund.succeeded"
	EventRefundFailed        EventType = "refund.failed"
)

// EventTypes lists every event type, in the order docs/api.md gives them.
var EventTypes = []EventType{
	EventChargeSucceeded, EventChargeDeclined, EventChargeFailed, EventChargeRequiresCapture, EventChargeCaptured,
	EventChargeVoided, EventChargeCaptureFailed, EventChargeRefunded, EventRefundSucceeded, EventRefundFailed,
}

// OfRefund reports whether events of type t carry a refund (else a charge).
func (t EventType) OfRefund() bool { return len(t) > 7 && t[:7] == "refund." }

// Event is one change of a charge or a refund, written by the store in the same transaction as
// the change itself (never one without the other), with the object as it was written.
type Event struct {
	ID        string
	Type      EventType
	Owner     string // the API key scope of the charge
	CreatedAt time.Time
	Charge    *Charge // charge.* events
	Refund    *Refund // refund.* events
}

// ChargeEvents are the events of a charge's change from what its store held (from) to c: none
// for a change no storefront needs to hear of (a charge still processing, an attempt noted).
func ChargeEvents(from Stored, c *Charge) []EventType {
	var out []EventType
	if c.Status != from.Status {
		switch {
		case from.Status == StatusRequiresCapture && c.Status == StatusSucceeded:
			out = append(out, EventChargeCaptured)
		case c.Status == StatusVoided:
			out = append(out, EventChargeVoided)
		case from.Status == StatusSucceeded && c.Status == StatusFailed:
			// Answered succeeded with its capture queued, and the gateway refused the capture.
			out = append(out, EventChargeCaptureFailed)
		case from.Status.Refundable() || from.Status == StatusRefunded:
			// refunded further: below
		case c.Status == StatusSucceeded, c.Status == StatusPartiallyRefunded, c.Status == StatusRefunded:
			// Found captured (and refunded since, at the gateway itself, for the last two).
			out = append(out, EventChargeSucceeded)
		case c.Status == StatusRequiresCapture:
			out = append(out, EventChargeRequiresCapture)
		case c.Status == StatusDeclined:
			out = append(out, EventChargeDeclined)
		case c.Status == StatusFailed:
			out = append(out, EventChargeFailed)
		}
	}
	if c.Refunded > from.Refunded || c.Status != from.Status && (c.Status == StatusRefunded || c.Status == StatusPartiallyRefunded) {
		out = append(out, EventChargeRefunded)
	}
	return out
}

// RefundEvents are the events of a refund's move from status from to to.
func RefundEvents(from, to RefundStatus) []EventType {
	switch {
	case from == to:
		return nil
	case to == RefundSucceeded:
		return []EventType{EventRefundSucceeded}
	case to == RefundFailed:
		return []EventType{EventRefundFailed}
	}
	return nil
}

// NewEventID returns a new event id, "evt_" and 26 random base32 characters.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "evt_" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])
}

// Rebase makes c, computed from an older version of its charge while that was processing, the
// next version after stored, when stored is still processing: what was written meanwhile is
// then only what a stray attempt's release noted (an attempt voided), which c keeps. false when
// stored has moved on (another writer resolved it): c must not be written, and stored stands.
func (c *Charge) Rebase(stored *Charge) bool {
	if stored.Status != StatusProcessing {
		return false
	}
	for i := range c.Attempts {
		at := &c.Attempts[i]
		for _, was := range stored.Attempts {
			if was.Voided && was.Reference != "" && was.Reference == at.Reference && was.Gateway == at.Gateway {
				at.Voided = true
			}
		}
	}
	c.Stored = stored.Stored
	return true
}
