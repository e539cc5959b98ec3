package payments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/routing"
)

// The operations on a charge after it was answered: capture, void, refund, and the look-ups of
// charges whose outcome is not known yet. Each goes through its own failure domain
// "<gateway>/<operation>" at the gateway that holds the charge: there is no failover, the money is
// there. Every operation sends a reference derived from the charge (or the refund's own id), so a
// repeat after a lost answer is applied once by the gateway.

// storeTimeout bounds the store writes made after a gateway answered: what the gateway did is
// stored even when the request's budget is spent.
const storeTimeout = 2 * time.Second

// bounded is the request's budget, cut loose from the caller: a client that goes away does not cut
// a gateway call short (it would become an unknown outcome).
func (s *Service) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), s.budget)
}

// storeCtx is the context of a store write made after a gateway answered.
func storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
}

// gatewayOf returns the adapter of the gateway that holds the charge, in tab.
func gatewayOf(tab *table, c *payrouter.Charge) (payrouter.Gateway, error) {
	gw := tab.gw.Adapters[c.Gateway]
	if gw == nil || tab.gw.Domains.Guard(c.Gateway, payrouter.OpStatus) == nil {
		return nil, fmt.Errorf("charge %s is held by gateway %q, which is not configured", c.ID, c.Gateway)
	}
	return gw, nil
}

// missed is what an operation op on c knows once its gateway did not take it, for its fallback:
// the one attempt made, and when op's breaker at that gateway reopens.
func missed(tab *table, op payrouter.Operation, c *payrouter.Charge, a payrouter.Attempt) fallback.Missed {
	return fallback.Missed{ChargeID: c.ID, Attempts: []payrouter.Attempt{a}, OpenUntil: tab.gw.OpenUntil(op)}
}

// lookUp asks the charge's gateway what it knows of the charge's transaction.
func lookUp(ctx context.Context, tab *table, c *payrouter.Charge, gw payrouter.Gateway) routing.Result {
	return lookUpAttempt(ctx, tab, c, gw, c.Gateway, c.Reference, c.GatewayReference)
}

// authorizationChange is capture or void: what ends a requires_capture charge.
type authorizationChange struct {
	op payrouter.Operation
	// send is the Gateway method (a method expression: payrouter.Gateway.Capture).
	send func(payrouter.Gateway, context.Context, payrouter.TxRequest) payrouter.Result
	// reach says whether a state found at the gateway shows the operation done.
	reach func(payrouter.TxState) bool
	// status is the charge's status once the operation is done.
	status payrouter.ChargeStatus
	// fallback answers when the gateway did not take it (a method expression:
	// fallback.Fallbacks.Capture).
	fallback func(fallback.Fallbacks, fallback.Missed) error
}

var (
	captureChange = authorizationChange{
		op:   payrouter.OpCapture,
		send: payrouter.Gateway.Capture,
		reach: func(s payrouter.TxState) bool {
			// Refunded since: it was captured all the same.
			return s == payrouter.TxCaptured || s == payrouter.TxPartiallyRefunded || s == payrouter.TxRefunded
		},
		status:   payrouter.StatusSucceeded,
		fallback: fallback.Fallbacks.Capture,
	}
	voidChange = authorizationChange{
		op:       payrouter.OpVoid,
		send:     payrouter.Gateway.Void,
		reach:    func(s payrouter.TxState) bool { return s == payrouter.TxVoided },
		status:   payrouter.StatusVoided,
		fallback: fallback.Fallbacks.Void,
	}
)

// Capture captures an authorized (requires_capture) charge at the gateway that authorized it. It
// returns the charge, now succeeded; an EState error for a charge in another status; a
// *fallback.Unavailable when the gateway could not take the capture now (sending it again with
// the same charge is safe: its reference makes a repeat a no-op); an EGatewayError when the
// gateway refused it.
func (s *Service) Capture(ctx context.Context, chargeID string) (*payrouter.Charge, error) {
	return s.changeAuthorization(ctx, chargeID, captureChange)
}

// Void cancels an authorized (requires_capture) charge at the gateway that authorized it; the
// charge becomes voided. Its answers are those of Capture.
func (s *Service) Void(ctx context.Context, chargeID string) (*payrouter.Charge, error) {
	return s.changeAuthorization(ctx, chargeID, voidChange)
}

func (s *Service) changeAuthorization(ctx context.Context, chargeID string, ch authorizationChange) (*payrouter.Charge, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	tab := s.table()
	c, gw, err := s.beginChange(ctx, tab, chargeID, ch.op)
	if err != nil {
		return nil, err
	}
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(c.Reference, ch.op), ChargeReference: c.Reference,
		GatewayReference: c.GatewayReference, Amount: c.Amount, Currency: c.Currency,
	}
	res := tab.gw.Call(c.Gateway, ch.op, req.Reference, func(ctx context.Context) payrouter.Result {
		return ch.send(gw, ctx, req)
	}).Do(ctx)
	a := res.Attempt()
	switch {
	case res.Outcome == payrouter.OutcomeSucceeded:
		return s.endChange(ctx, c, ch, ch.status)
	case res.Outcome.NotSent():
		if _, err := s.endChange(ctx, c, ch, ""); err != nil {
			s.log.WarnContext(ctx, "charge.store_failed", "charge_id", c.ID, "err", err)
		}
		return nil, ch.fallback(tab.fallbacks, missed(tab, ch.op, c, a))
	case res.Outcome.MayHaveBeenApplied():
		// It may have been applied: one look-up tells. When it cannot, the caller sends the same
		// request again, which the reference makes safe; meanwhile the charge stays marked, so
		// the opposite operation is refused until the mark is stale.
		look := lookUp(ctx, tab, c, gw)
		if look.Outcome == payrouter.OutcomeSucceeded && ch.reach(look.State) {
			s.log.InfoContext(ctx, "charge.resolved", "charge_id", c.ID, "gateway", c.Gateway, "operation", ch.op, "state", look.State)
			return s.endChange(ctx, c, ch, ch.status)
		}
		s.log.WarnContext(ctx, "charge.operation_unresolved", "charge_id", c.ID, "gateway", c.Gateway, "operation", ch.op,
			"outcome", res.Outcome, "lookup_outcome", look.Outcome, "state", look.State, "detail", res.Detail)
		return nil, ch.fallback(tab.fallbacks, missed(tab, ch.op, c, a))
	default: // declined, error: the gateway refused it
		s.log.WarnContext(ctx, "charge.operation_refused", "charge_id", c.ID, "gateway", c.Gateway, "operation", ch.op,
			"outcome", res.Outcome, "decline_code", res.DeclineCode, "detail", res.Detail)
		if _, err := s.endChange(ctx, c, ch, ""); err != nil {
			s.log.WarnContext(ctx, "charge.store_failed", "charge_id", c.ID, "err", err)
		}
		return nil, payrouter.Errorf(payrouter.EGatewayError, "%s refused to %s charge %s (%s)", c.Gateway, ch.op, c.ID, whyRefused(res.Result))
	}
}

// beginChange marks the authorization chargeID as having op sent (payrouter.Charge.BeginChange)
// before anything is sent, so that a capture and a void of one charge at once cannot both reach
// its gateway: the second is refused (EState) with nothing sent. It returns the charge as marked
// and its gateway.
func (s *Service) beginChange(ctx context.Context, tab *table, chargeID string, op payrouter.Operation) (*payrouter.Charge, payrouter.Gateway, error) {
	for range changeTries {
		c, err := s.Get(ctx, chargeID)
		if err != nil {
			return nil, nil, err
		}
		gw, err := gatewayOf(tab, c)
		if err != nil {
			return nil, nil, err
		}
		// A mark older than one try of op (the budget and the gateway's timeout) is one whose
		// instance stopped mid-call.
		if err := c.BeginChange(op, s.now().UTC(), s.budget+tab.gw.Timeout(c.Gateway, op)); err != nil {
			return nil, nil, err
		}
		c.UpdatedAt = c.ChangingSince
		err = s.charges.SaveCharge(ctx, c)
		if errors.Is(err, payrouter.ErrStale) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("marking charge %s before its %s: %w", c.ID, op, err)
		}
		return c, gw, nil
	}
	return nil, nil, errBusy(chargeID)
}

// endChange stores what op came to (status, or "" for nothing: the authorization stands) and
// clears its mark. A failure to store it is an error: the caller sends the same request again,
// and the gateway, which already did it, answers the same (the operation's reference is the
// same). A charge found moved on meanwhile (the same op by another request) is returned as it
// stands.
func (s *Service) endChange(ctx context.Context, c *payrouter.Charge, ch authorizationChange, status payrouter.ChargeStatus) (*payrouter.Charge, error) {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	for range changeTries {
		if c.Status != payrouter.StatusRequiresCapture {
			return c, nil // ended by another request for the same op
		}
		c.EndChange(status)
		c.UpdatedAt = s.now().UTC()
		err := s.charges.SaveCharge(ctx, c)
		if err == nil {
			if status != "" {
				s.log.InfoContext(ctx, "charge."+string(status), "charge_id", c.ID, "gateway", c.Gateway)
			}
			return c, nil
		}
		if !errors.Is(err, payrouter.ErrStale) {
			return nil, fmt.Errorf("storing charge %s as %s: %w", c.ID, cmp.Or(status, payrouter.StatusRequiresCapture), err)
		}
		stored, err := s.charges.Charge(ctx, c.ID)
		if err != nil {
			return nil, fmt.Errorf("storing charge %s as %s: %w", c.ID, status, err)
		}
		c = stored
	}
	return nil, errBusy(c.ID)
}

// whyRefused says why a gateway refused an operation, in payrouter's own words and the reason
// code, for a refund's failure_reason and a problem's detail: never the gateway's own text,
// which may say anything (the refund.attempt and charge.operation_refused lines log it, as the
// adapter screened it).
func whyRefused(res payrouter.Result) string {
	if res.Outcome == payrouter.OutcomeDeclined {
		return "declined by the gateway: " + reasonCode(res.DeclineCode)
	}
	return "refused by the gateway as malformed: gateway_error"
}

// reasonCode is a decline code fit to show: lower snake case, at most 64 characters, else
// "declined".
func reasonCode(code string) string {
	ok := code != "" && len(code) <= 64
	for i := 0; ok && i < len(code); i++ {
		c := code[i]
		ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_'
	}
	if !ok {
		return "declined"
	}
	return code
}

// workRefund sends a queued refund (TaskRefund) again, with the reference it was first sent with,
// so that the gateway applies it once however often it is sent. nil when it is done: applied,
// refused, or nothing left to do; fallback.ErrLater while the gateway cannot answer; another
// error when the store failed (the task is handed out again).
func (s *Service) workRefund(ctx context.Context, t payrouter.Task) error {
	if s.refunds == nil {
		return fmt.Errorf("%w: no refund store configured", fallback.ErrLater)
	}
	rf, err := s.refunds.Refund(ctx, t.RefundID)
	if errors.Is(err, payrouter.ErrNotFound) {
		// Its request queued this task and then stopped before storing the refund (Refund):
		// nothing was sent, and the caller was promised nothing.
		s.log.WarnContext(ctx, "task.refund_never_stored", "refund_id", t.RefundID, "charge_id", t.ChargeID,
			"then", "nothing to send: its request stopped before the refund was stored")
		return nil
	}
	if err != nil {
		return fmt.Errorf("loading refund %s: %w", t.RefundID, err)
	}
	if rf.Status == payrouter.RefundSucceeded || rf.Status == payrouter.RefundFailed {
		return nil
	}
	c, err := s.charges.Charge(ctx, rf.ChargeID)
	if err != nil {
		return fmt.Errorf("loading charge %s of refund %s: %w", rf.ChargeID, rf.ID, err)
	}
	tab, gw, err := s.reachable(ctx, t, payrouter.OpRefund)
	if err != nil {
		return err
	}
	res := sendRefund(ctx, s.log, tab, gw, c, rf)
	switch {
	case res.Outcome == payrouter.OutcomeSucceeded:
		if err := s.completeRefund(ctx, rf, c, res.Result); err != nil {
			return err // sent again later: the gateway answers the same, and it is stored then
		}
		return nil
	case res.Outcome.Unanswered():
		return fmt.Errorf("%w: refund %s: %s", fallback.ErrLater, rf.ID, res.Outcome)
	default: // declined, error: sending it again would be refused again
		s.failRefund(ctx, rf, c, whyRefused(res.Result))
		return nil
	}
}

// ErrNoRefund is the answer for a refund id that does not exist, or that the caller may not see.
func ErrNoRefund(id string) error { return payrouter.Errorf(payrouter.ENotFound, "no refund %q", id) }

// GetRefund returns a stored refund of scope's, ENotFound when there is none with that id.
// Another scope's refund is answered exactly as one that does not exist.
func (s *Service) GetRefund(ctx context.Context, scope, id string) (*payrouter.Refund, error) {
	if s.refunds == nil {
		return nil, ErrNoRefund(id)
	}
	rf, err := s.refunds.Refund(ctx, id)
	if errors.Is(err, payrouter.ErrNotFound) || err == nil && !rf.OwnedBy(scope) {
		return nil, ErrNoRefund(id)
	}
	return rf, err
}

// Refresh returns a charge as GET /charge/{id} shows it: the stored charge, and for one still
// processing what its gateway says of it now. When the gateway cannot be asked, the status
// fallback answers (fallback.Fallbacks.Status): the stored charge with stale true, or a
// *fallback.Unavailable. Another scope's charge is answered exactly as one that does not exist
// (payrouter.Charge.OwnedBy): a key cannot even learn which ids are taken.
func (s *Service) Refresh(ctx context.Context, scope, id string) (c *payrouter.Charge, stale bool, err error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	c, err = s.Get(ctx, id)
	if err == nil && !c.OwnedBy(scope) {
		return nil, false, ErrNoCharge(id)
	}
	if err != nil || c.Status != payrouter.StatusProcessing {
		return c, false, err
	}
	answered, look, err := s.lookUpProcessing(ctx, c)
	if err != nil {
		// What the gateway said is still the truth to answer; the reconciler stores it later.
		s.log.ErrorContext(ctx, "charge.store_failed", "charge_id", c.ID, "status", c.Status, "err", err)
	}
	if answered {
		return c, false, nil
	}
	tab := s.table()
	return tab.fallbacks.Status(missed(tab, payrouter.OpStatus, c, look), c)
}

// ResolveProcessing looks a processing charge up at its gateway and moves it on by what the
// gateway says: captured is succeeded; authorized is requires_capture, or is captured now when the
// charge asked for a capture (it stays processing when that fails); declined and failed are
// final; not_found is failed once no attempt can still be on its way, and a late approval is
// then voided by a queued recheck; pending stays. answered is false when the gateway could not
// be asked. The charge is stored when it changed; err is a failure to store it.
func (s *Service) ResolveProcessing(ctx context.Context, c *payrouter.Charge) (answered bool, err error) {
	answered, _, err = s.lookUpProcessing(ctx, c)
	return answered, err
}

// lookUpProcessing is ResolveProcessing, also returning the look-up's attempt (for the answer of
// a status fallback that fails).
func (s *Service) lookUpProcessing(ctx context.Context, c *payrouter.Charge) (answered bool, look payrouter.Attempt, err error) {
	if c.Status != payrouter.StatusProcessing {
		return true, payrouter.Attempt{}, nil
	}
	tab := s.table()
	if i := unsettledSale(c); i >= 0 {
		if look, ok := s.saleFirst(ctx, tab, c, i); !ok {
			return false, look, nil
		}
	}
	gw := tab.gw.Adapters[c.Gateway]
	if gw == nil || c.Reference == "" || tab.gw.Domains.Guard(c.Gateway, payrouter.OpStatus) == nil {
		// Stored before its first call and never settled (the process stopped mid-call), or held
		// by a gateway no longer configured: there is nothing this look-up can ask.
		return false, payrouter.Attempt{Gateway: c.Gateway, Outcome: payrouter.OutcomeUnknown}, nil
	}
	found := lookUp(ctx, tab, c, gw)
	look, res := found.Attempt(), found.Result
	if res.Outcome != payrouter.OutcomeSucceeded {
		s.log.InfoContext(ctx, "charge.unresolved", "charge_id", c.ID, "gateway", c.Gateway, "lookup_outcome", res.Outcome, "detail", res.Detail)
		return false, look, nil
	}

	type shown struct {
		status         payrouter.ChargeStatus
		gwRef, decline string
		resolved       payrouter.TxState
	}
	last := func() payrouter.TxState {
		if n := len(c.Attempts); n > 0 {
			return c.Attempts[n-1].Resolved
		}
		return ""
	}
	before := shown{c.Status, c.GatewayReference, c.DeclineCode, last()}
	if n := len(c.Attempts); n > 0 {
		c.Attempts[n-1].Resolved = res.State
	}
	res.GatewayReference = cmp.Or(res.GatewayReference, c.GatewayReference)
	s.moveOn(ctx, tab, c, gw, res)
	s.log.InfoContext(ctx, "charge.resolved", "charge_id", c.ID, "gateway", c.Gateway, "state", res.State, "status", c.Status)

	if (shown{c.Status, c.GatewayReference, c.DeclineCode, last()}) == before {
		return true, look, nil
	}
	return true, look, s.storeResolved(ctx, c)
}

// saleFirst looks up the sale c.Attempts[i] of a processing charge that names its hedge (its
// instance stopped, or its capture could not be queued, with both in flight) before the hedge is
// looked up, and perhaps captured: a sale that holds money (approved, captured or not) becomes
// the charge's attempt, looked up next, and the hedge's authorization is released (a queued
// recheck voids it); a sale that holds nothing lets the hedge be resolved. ok is false while the
// sale's outcome is not known: the charge stays processing.
func (s *Service) saleFirst(ctx context.Context, tab *table, c *payrouter.Charge, i int) (look payrouter.Attempt, ok bool) {
	sale := &c.Attempts[i]
	gw := tab.gw.Adapters[sale.Gateway]
	if gw == nil || tab.gw.Domains.Guard(sale.Gateway, payrouter.OpStatus) == nil {
		return payrouter.Attempt{Gateway: sale.Gateway, Outcome: payrouter.OutcomeUnknown}, false
	}
	found := lookUpAttempt(ctx, tab, c, gw, sale.Gateway, sale.Reference, "")
	if found.Outcome != payrouter.OutcomeSucceeded {
		s.log.InfoContext(ctx, "charge.unresolved", "charge_id", c.ID, "gateway", sale.Gateway, "lookup_outcome", found.Outcome, "detail", found.Detail)
		return found.Attempt(), false
	}
	switch found.State {
	case payrouter.TxAuthorized, payrouter.TxCaptured, payrouter.TxPartiallyRefunded, payrouter.TxRefunded:
		if !slices.ContainsFunc(c.Attempts, func(a payrouter.Attempt) bool { return a.Gateway == c.Gateway && a.Reference == c.Reference }) {
			// The hedge the charge was stored naming, in flight when its instance stopped: an
			// attempt of the charge's, which its recheck releases.
			c.Attempts = append(c.Attempts, payrouter.Attempt{Gateway: c.Gateway, Outcome: payrouter.OutcomeUnknown, Reference: c.Reference, Hedge: true})
		}
		s.ReleaseLater(ctx, payrouter.TaskRecheck, c, c.Gateway, c.Reference, c.GatewayReference, 0)
		c.Gateway, c.Reference, c.GatewayReference = sale.Gateway, sale.Reference, found.GatewayReference
		return found.Attempt(), true
	case payrouter.TxDeclined, payrouter.TxFailed, payrouter.TxVoided:
		sale.Resolved = found.State
		return found.Attempt(), true
	case payrouter.TxNotFound:
		if s.now().Sub(c.CreatedAt) <= s.budget+tab.gw.Timeout(sale.Gateway, payrouter.OpCharge) {
			return found.Attempt(), false // it may still be on its way
		}
		sale.Resolved = found.State
		s.ReleaseLater(ctx, payrouter.TaskRecheck, c, sale.Gateway, sale.Reference, "", 0)
		return found.Attempt(), true
	}
	return found.Attempt(), false // pending: not known yet
}

// moveOn sets a processing charge's status by what its gateway's look-up found (res), capturing
// an authorization the charge asked to capture (lookUpProcessing).
func (s *Service) moveOn(ctx context.Context, tab *table, c *payrouter.Charge, gw payrouter.Gateway, res payrouter.Result) {
	switch res.State {
	case payrouter.TxNotFound:
		// An attempt can still be on its way to the gateway until the budget of its request and
		// the gateway's own timeout have passed: only then is "not found" an answer.
		if s.now().Sub(c.CreatedAt) > s.budget+tab.gw.Timeout(c.Gateway, payrouter.OpCharge) {
			c.Status = payrouter.StatusFailed
			s.ReleaseLater(ctx, payrouter.TaskRecheck, c, c.Gateway, c.Reference, "", 0)
		}
	case payrouter.TxAuthorized:
		if !c.Capture {
			routing.Apply(c, c.Gateway, c.Reference, routing.OutcomeOfState(res))
			break
		}
		// The charge asked for a capture, and only the authorization is known to have happened.
		captured, ok := s.captureProcessing(ctx, tab, c, gw, res)
		if ok {
			routing.Apply(c, c.Gateway, c.Reference, captured)
		}
	case payrouter.TxVoided:
		c.Status = payrouter.StatusVoided
		c.GatewayReference = res.GatewayReference
	case payrouter.TxPartiallyRefunded, payrouter.TxRefunded:
		// Captured, then refunded at the gateway without payrouter: shown as the gateway has
		// it, never as plainly succeeded.
		s.log.WarnContext(ctx, "charge.refunded_elsewhere", "charge_id", c.ID, "gateway", c.Gateway, "state", res.State)
		routing.Apply(c, c.Gateway, c.Reference, routing.OutcomeOfState(res))
	default: // captured, declined, failed, pending, or a state that says nothing
		routing.Apply(c, c.Gateway, c.Reference, routing.OutcomeOfState(res))
	}
}

// storeResolved stores a charge a look-up moved on, unless it was resolved meanwhile (the
// reconciler, another GET, its own request): that one stands, and c becomes it. A charge still
// processing but written since (an attempt noted) takes what the look-up found on top of its
// latest version.
func (s *Service) storeResolved(ctx context.Context, c *payrouter.Charge) error {
	sctx, cancel := storeCtx(ctx)
	defer cancel()
	for range changeTries {
		c.UpdatedAt = s.now().UTC()
		err := s.charges.SaveCharge(sctx, c)
		if !errors.Is(err, payrouter.ErrStale) {
			if err != nil {
				return fmt.Errorf("storing resolved charge %s as %s: %w", c.ID, c.Status, err)
			}
			return nil
		}
		stored, err := s.charges.Charge(sctx, c.ID)
		if err != nil {
			return fmt.Errorf("storing resolved charge %s as %s: %w", c.ID, c.Status, err)
		}
		if !c.Rebase(stored) {
			*c = *stored
			return nil
		}
	}
	return fmt.Errorf("storing resolved charge %s: %w", c.ID, errBusy(c.ID))
}

// captureProcessing captures a processing charge found authorized, with the reference Capture
// uses. ok is false when the capture did not happen (the charge stays processing, and the next
// look-up tries again).
func (s *Service) captureProcessing(ctx context.Context, tab *table, c *payrouter.Charge, gw payrouter.Gateway, found payrouter.Result) (payrouter.Result, bool) {
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(c.Reference, payrouter.OpCapture), ChargeReference: c.Reference,
		GatewayReference: found.GatewayReference, Amount: c.Amount, Currency: c.Currency,
	}
	res := tab.gw.Call(c.Gateway, payrouter.OpCapture, req.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Capture(ctx, req)
	}).Do(ctx)
	if res.Outcome != payrouter.OutcomeSucceeded {
		s.log.WarnContext(ctx, "charge.capture_failed", "charge_id", c.ID, "gateway", c.Gateway, "outcome", res.Outcome, "detail", res.Detail)
		return res.Result, false
	}
	return payrouter.Result{
		Outcome: payrouter.OutcomeSucceeded, State: payrouter.TxCaptured,
		GatewayReference: cmp.Or(res.GatewayReference, found.GatewayReference),
	}, true
}
