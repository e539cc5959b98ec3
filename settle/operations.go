package settle

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// The operations on a charge after it was answered: capture, void, refund, and the look-ups of
// charges whose outcome is not known yet. Each goes through its own failure domain
// "<gateway>/<operation>" at the gateway that holds the charge: there is no failover, the money is
// there. Every operation sends a reference derived from the charge (or the refund's own id), so a
// repeat after a lost answer is applied once by the gateway.

// storeTimeout bounds the store writes made after a gateway answered: what the gateway did is
// stored even when the request's budget is spent.
const storeTimeout = 2 * time.Second

// chargeLocks serialise, within this process, the read-modify-write of one charge and its refunds
// after a gateway answered (never around a gateway call): a refund worker and an API request
// completing two refunds of one charge at once must both count. Stores write charges whole and
// offer no compare-and-set, so instances of a fleet can still race; the gateway, which refuses to
// refund more than was captured, stays the safety net for the money itself.
var (
	chargeLocks    [64]sync.Mutex
	chargeLockSeed = maphash.MakeSeed()
)

// lockCharge locks the charge id's stripe and returns its unlock.
func lockCharge(id string) func() {
	m := &chargeLocks[maphash.String(chargeLockSeed, id)%uint64(len(chargeLocks))]
	m.Lock()
	return m.Unlock
}

// bounded is the request's budget, cut loose from the caller: a client that goes away does not cut
// a gateway call short (it would become an unknown outcome).
func (s *Settler) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
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
func lookUp(ctx context.Context, tab *table, c *payrouter.Charge, gw payrouter.Gateway) Result {
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(c.Reference, payrouter.OpStatus), ChargeReference: c.Reference,
		GatewayReference: c.GatewayReference, Amount: c.Amount, Currency: c.Currency,
	}
	return tab.gw.Call(c.Gateway, payrouter.OpStatus, req.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Status(ctx, req)
	}).Do(ctx)
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
func (s *Settler) Capture(ctx context.Context, chargeID string) (*payrouter.Charge, error) {
	return s.changeAuthorization(ctx, chargeID, captureChange)
}

// Void cancels an authorized (requires_capture) charge at the gateway that authorized it; the
// charge becomes voided. Its answers are those of Capture.
func (s *Settler) Void(ctx context.Context, chargeID string) (*payrouter.Charge, error) {
	return s.changeAuthorization(ctx, chargeID, voidChange)
}

func (s *Settler) changeAuthorization(ctx context.Context, chargeID string, ch authorizationChange) (*payrouter.Charge, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	c, err := s.Get(ctx, chargeID)
	if err != nil {
		return nil, err
	}
	if c.Status != payrouter.StatusRequiresCapture {
		return nil, payrouter.Errorf(payrouter.EState, "charge %s is %s: only a requires_capture charge can be %s", c.ID, c.Status, pastTense(ch.op))
	}
	tab := s.table()
	gw, err := gatewayOf(tab, c)
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
		return s.setStatus(ctx, c, ch.status)
	case res.Outcome.NotSent():
		return nil, ch.fallback(tab.fallbacks, missed(tab, ch.op, c, a))
	case res.Outcome.MayHaveProcessed() || res.Outcome == payrouter.OutcomePending:
		// It may have been applied: one look-up tells. When it cannot, the caller sends the same
		// request again, which the reference makes safe.
		look := lookUp(ctx, tab, c, gw)
		if look.Outcome == payrouter.OutcomeSucceeded && ch.reach(look.State) {
			s.log.InfoContext(ctx, "charge.resolved", "charge_id", c.ID, "gateway", c.Gateway, "operation", ch.op, "state", look.State)
			return s.setStatus(ctx, c, ch.status)
		}
		s.log.WarnContext(ctx, "charge.operation_unresolved", "charge_id", c.ID, "gateway", c.Gateway, "operation", ch.op,
			"outcome", res.Outcome, "lookup_outcome", look.Outcome, "state", look.State, "detail", res.Detail)
		return nil, ch.fallback(tab.fallbacks, missed(tab, ch.op, c, a))
	default: // declined, error: the gateway refused it
		s.log.WarnContext(ctx, "charge.operation_refused", "charge_id", c.ID, "gateway", c.Gateway, "operation", ch.op,
			"outcome", res.Outcome, "decline_code", res.DeclineCode, "detail", res.Detail)
		return nil, payrouter.Errorf(payrouter.EGatewayError, "%s refused to %s charge %s (%s)", c.Gateway, ch.op, c.ID, whyRefused(res.Result))
	}
}

// setStatus stores the status a gateway's answer gave the charge. A failure to store it is an
// error: the caller sends the same request again, and the gateway, which already did it, answers
// the same (the operation's reference is the same).
func (s *Settler) setStatus(ctx context.Context, c *payrouter.Charge, status payrouter.ChargeStatus) (*payrouter.Charge, error) {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	unlock := lockCharge(c.ID)
	defer unlock()
	if stored, err := s.charges.Charge(ctx, c.ID); err == nil {
		c = stored // anything stored since (a voided stray attempt) is kept
	}
	c.Status = status
	c.UpdatedAt = s.now().UTC()
	if err := s.charges.SaveCharge(ctx, c); err != nil {
		return nil, fmt.Errorf("storing charge %s as %s: %w", c.ID, status, err)
	}
	s.log.InfoContext(ctx, "charge."+string(status), "charge_id", c.ID, "gateway", c.Gateway)
	return c, nil
}

func pastTense(op payrouter.Operation) string {
	switch op {
	case payrouter.OpCapture:
		return "captured"
	case payrouter.OpVoid:
		return "voided"
	}
	return string(op) + "ed"
}

// whyRefused says why a gateway refused an operation, for problem details: never card data.
func whyRefused(res payrouter.Result) string {
	switch {
	case res.DeclineCode != "":
		return string(res.Outcome) + ": " + res.DeclineCode
	case res.Detail != "":
		return string(res.Outcome) + ": " + res.Detail
	}
	return string(res.Outcome)
}

// Refund gives back amount (0: all that is left) of a succeeded charge, at the gateway that
// captured it. The refund is stored as pending before it is sent. It returns the refund,
// succeeded, or queued when the gateway could not take it now (or its answer was lost) and the
// refund fallback queues: the queue worker sends it again, with the same reference, until the
// gateway answers. Errors: EState when the charge is not succeeded or has less left than amount;
// a *fallback.Unavailable when the gateway could not take it and the fallback fails; an
// EGatewayError when the gateway refused it (the refund is then failed).
//
// id names the refund ("": a new random one). httpapi derives it from the request's
// Idempotency-Key, so that a retry whose key was free again (the instance holding it died
// mid-request, after the refund was stored) finds that refund and answers it as it stands,
// instead of refunding a second time; its safety task finishes it if it is still pending. The
// same id asked for another charge or amount is EMismatch.
func (s *Settler) Refund(ctx context.Context, chargeID string, amount int64, id string) (*payrouter.Refund, error) {
	if amount < 0 {
		return nil, payrouter.Errorf(payrouter.EInvalid, "a refund's amount must be positive")
	}
	if s.refunds == nil {
		return nil, errors.New("refunds: no refund store configured")
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	c, err := s.Get(ctx, chargeID)
	if err != nil {
		return nil, err
	}
	if id != "" {
		if prev, found, err := s.refundAskedAgain(ctx, c, amount, id); found || err != nil {
			return prev, err
		}
	} else {
		id = "re_" + rand.Text()
	}
	left := c.Amount - c.Refunded
	switch {
	case c.Status == payrouter.StatusRefunded || left <= 0 && refundable(c.Status):
		return nil, payrouter.Errorf(payrouter.EState, "charge %s is refunded in full already", c.ID)
	case !refundable(c.Status):
		return nil, payrouter.Errorf(payrouter.EState, "charge %s is %s: only a succeeded charge can be refunded", c.ID, c.Status)
	case amount > left:
		return nil, payrouter.Errorf(payrouter.EState, "charge %s has %d left to refund, less than %d", c.ID, left, amount)
	case amount == 0:
		amount = left
	}
	tab := s.table()
	gw, err := gatewayOf(tab, c)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	rf := &payrouter.Refund{
		ID: id, ChargeID: c.ID, Amount: amount, Currency: c.Currency, Status: payrouter.RefundPending,
		Gateway: c.Gateway, Owner: c.Owner, Reference: payrouter.RefundReference(id), CreatedAt: now, UpdatedAt: now,
	}
	// Before it is sent, two writes, in this order. First a task that finds out once this
	// request is over, should this process die before the gateway's answer is stored: it sends
	// the refund again with the same reference (applied once), or finds it settled and does
	// nothing. Then the refund itself, on record whatever happens to this process. Should the
	// process die between the two, the task finds no refund, and nothing was sent or promised;
	// the other order left a pending refund that nothing would ever send (found by the chaos
	// check: a refund answered 202 pending after its first instance was killed, never applied).
	if err := s.enqueueRefund(ctx, rf, now.Add(s.budget+tab.gw.Timeout(c.Gateway, payrouter.OpRefund))); err != nil {
		return nil, fmt.Errorf("queueing the task that finishes refund %s of charge %s, before sending it: %w", rf.ID, c.ID, err)
	}
	if err := s.refunds.SaveRefund(ctx, rf); err != nil {
		return nil, fmt.Errorf("storing refund of charge %s before sending it: %w", c.ID, err)
	}
	return s.refundAnswered(ctx, tab, c, rf, sendRefund(ctx, s.log, tab, gw, c, rf))
}

// refundAskedAgain looks for the refund id names, asked for before: found, it is answered as it
// stands (and queued again when it is not settled); the same id asked for another charge or
// amount is EMismatch.
func (s *Settler) refundAskedAgain(ctx context.Context, c *payrouter.Charge, amount int64, id string) (prev *payrouter.Refund, found bool, err error) {
	prev, err = s.refunds.Refund(ctx, id)
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("looking for an earlier refund %s: %w", id, err)
	case prev.ChargeID != c.ID || amount != 0 && amount != prev.Amount:
		return nil, true, payrouter.Errorf(payrouter.EMismatch, "refund %s was asked for with another charge or amount", id)
	}
	s.log.WarnContext(ctx, "refund.asked_again", "refund_id", id, "charge_id", c.ID, "status", prev.Status,
		"why", "its Idempotency-Key was free again: the instance that held it stopped mid-request")
	if prev.Status == payrouter.RefundPending || prev.Status == payrouter.RefundQueued {
		// Not settled, and what the stopped instance queued to settle it may be gone with it (a
		// refund stored before this version queued its task first): a task of its own, at once.
		// Sent twice, a refund is applied once (its reference).
		if err := s.enqueueRefund(ctx, prev, time.Time{}); err != nil {
			return nil, true, fmt.Errorf("queueing refund %s again: %w", id, err)
		}
	}
	return prev, true, nil
}

// refundAnswered moves a refund on by its gateway's answer to its first sending: succeeded;
// failed when the gateway refused it; otherwise (not sent, or maybe applied) as the refund
// fallback decides (fallback.Fallbacks.Refund), with this Settler's queueing and failing.
func (s *Settler) refundAnswered(ctx context.Context, tab *table, c *payrouter.Charge, rf *payrouter.Refund, res Result) (*payrouter.Refund, error) {
	switch {
	case res.Outcome == payrouter.OutcomeSucceeded:
		if err := s.completeRefund(ctx, rf, res.Result); err != nil {
			// The gateway applied it: the answer says so, and a retry of the request must not
			// become a second refund, so this is no error for the caller.
			s.log.ErrorContext(ctx, "refund.store_failed", "refund_id", rf.ID, "charge_id", c.ID, "err", err)
		}
		return rf, nil
	case res.Outcome.NotSent(), res.Outcome.MayHaveProcessed(), res.Outcome == payrouter.OutcomePending:
		return tab.fallbacks.Refund(missed(tab, payrouter.OpRefund, c, res.Attempt()), rf, fallback.RefundSteps{
			Queue: func(maybeSent bool) error { return s.queueRefund(ctx, rf, maybeSent) },
			Fail:  func(detail string) { s.failRefund(ctx, rf, detail) },
		})
	default: // declined, error
		s.failRefund(ctx, rf, whyRefused(res.Result))
		return nil, payrouter.Errorf(payrouter.EGatewayError, "%s refused refund %s of charge %s (%s)", c.Gateway, rf.ID, c.ID, whyRefused(res.Result))
	}
}

// sendRefund sends a refund through its gateway's refund guard in tab, with its own reference.
func sendRefund(ctx context.Context, log *slog.Logger, tab *table, gw payrouter.Gateway, c *payrouter.Charge, rf *payrouter.Refund) Result {
	req := payrouter.TxRequest{
		Reference: rf.Reference, ChargeReference: c.Reference, GatewayReference: c.GatewayReference,
		Amount: rf.Amount, Currency: rf.Currency,
	}
	res := tab.gw.Call(rf.Gateway, payrouter.OpRefund, req.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Refund(ctx, req)
	}).Do(ctx)
	if res.Outcome != payrouter.OutcomeSucceeded {
		log.InfoContext(ctx, "refund.attempt", "refund_id", rf.ID, "charge_id", c.ID, "gateway", rf.Gateway,
			"outcome", res.Outcome, "duration_ms", res.Duration.Milliseconds(), "detail", res.Detail)
	}
	return res
}

// queueRefund marks the refund queued, then queues its task, in that order: the worker never
// finds a task whose refund is about to be overwritten. When the task cannot be queued, the
// refund goes back to what it was (pending: it may have been sent) and the error is returned: a
// refund that is not queued is never answered as queued.
func (s *Settler) queueRefund(ctx context.Context, rf *payrouter.Refund, maybeSent bool) error {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	was := *rf
	rf.Status, rf.UpdatedAt = payrouter.RefundQueued, s.now().UTC()
	err := s.refunds.SaveRefund(ctx, rf)
	if err == nil {
		err = s.enqueueRefund(ctx, rf, time.Time{})
		if err != nil {
			*rf = was
			if serr := s.refunds.SaveRefund(ctx, rf); serr != nil {
				s.log.ErrorContext(ctx, "refund.store_failed", "refund_id", rf.ID, "charge_id", rf.ChargeID, "err", serr)
			}
		}
	} else {
		*rf = was
	}
	if err != nil {
		level := s.log.Warn
		if maybeSent {
			level = s.log.Error // the money may have moved and nothing will find out: ops must look
		}
		s.obs.TaskNotQueued(payrouter.TaskRefund)
		level("refund.not_queued", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "maybe_sent", maybeSent, "err", err)
		return err
	}
	s.log.InfoContext(ctx, "refund.queued", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "maybe_sent", maybeSent)
	return nil
}

// enqueueRefund queues the task that sends rf, not before notBefore.
func (s *Settler) enqueueRefund(ctx context.Context, rf *payrouter.Refund, notBefore time.Time) error {
	if s.queue == nil {
		return errors.New("no queue configured")
	}
	_, err := s.queue.Enqueue(ctx, payrouter.Task{
		Kind: payrouter.TaskRefund, Gateway: rf.Gateway, ChargeID: rf.ChargeID, RefundID: rf.ID,
		Amount: rf.Amount, Currency: rf.Currency, NotBefore: notBefore, CreatedAt: s.now().UTC(),
	})
	return err // the caller logs it, or returns it to be answered (and logged) as a refusal
}

// refundable reports whether a charge in that status has captured money that may be given back.
func refundable(s payrouter.ChargeStatus) bool {
	return s == payrouter.StatusSucceeded || s == payrouter.StatusPartiallyRefunded
}

// completeRefund records a refund the gateway applied, and adds it to its charge's refunded
// amount, once: a refund found succeeded already (sent twice, by a worker and a request, or by
// two workers) is not counted again.
func (s *Settler) completeRefund(ctx context.Context, rf *payrouter.Refund, res payrouter.Result) error {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	unlock := lockCharge(rf.ChargeID)
	defer unlock()
	if stored, err := s.refunds.Refund(ctx, rf.ID); err == nil && stored.Status == payrouter.RefundSucceeded {
		*rf = *stored
		return nil
	}
	rf.Status, rf.Detail, rf.UpdatedAt = payrouter.RefundSucceeded, "", s.now().UTC()
	rf.GatewayReference = cmp.Or(res.GatewayReference, rf.GatewayReference)
	// The refund first: should the charge not be stored, its refunded amount is short, which the
	// gateway makes safe (it refuses to refund more than was captured); the other order could count
	// one refund twice.
	if err := s.refunds.SaveRefund(ctx, rf); err != nil {
		return fmt.Errorf("storing refund %s as succeeded: %w", rf.ID, err)
	}
	s.log.InfoContext(ctx, "refund.succeeded", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "amount", rf.Amount)
	c, err := s.charges.Charge(ctx, rf.ChargeID)
	if err != nil {
		return fmt.Errorf("adding refund %s to charge %s: %w", rf.ID, rf.ChargeID, err)
	}
	c.Refunded += rf.Amount
	c.Status = payrouter.StatusPartiallyRefunded
	if c.Refunded >= c.Amount {
		c.Status = payrouter.StatusRefunded
	}
	c.UpdatedAt = rf.UpdatedAt
	if err := s.charges.SaveCharge(ctx, c); err != nil {
		return fmt.Errorf("adding refund %s to charge %s: %w", rf.ID, rf.ChargeID, err)
	}
	return nil
}

// failRefund records a refund that will not be sent again, and why.
func (s *Settler) failRefund(ctx context.Context, rf *payrouter.Refund, detail string) {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	rf.Status, rf.Detail, rf.UpdatedAt = payrouter.RefundFailed, detail, s.now().UTC()
	s.log.WarnContext(ctx, "refund.failed", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "detail", detail)
	if err := s.refunds.SaveRefund(ctx, rf); err != nil {
		s.log.ErrorContext(ctx, "refund.store_failed", "refund_id", rf.ID, "charge_id", rf.ChargeID, "err", err)
	}
}

// workRefund sends a queued refund (TaskRefund) again, with the reference it was first sent with,
// so that the gateway applies it once however often it is sent. nil when it is done: applied,
// refused, or nothing left to do; fallback.ErrLater while the gateway cannot answer; another
// error when the store failed (the task is handed out again).
func (s *Settler) workRefund(ctx context.Context, t payrouter.Task) error {
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
	tab := s.table()
	gw := tab.gw.Adapters[rf.Gateway]
	if gw == nil || tab.gw.Domains.Guard(rf.Gateway, payrouter.OpRefund) == nil {
		return fmt.Errorf("%w: gateway %q is not configured", fallback.ErrLater, rf.Gateway)
	}
	res := sendRefund(ctx, s.log, tab, gw, c, rf)
	switch {
	case res.Outcome == payrouter.OutcomeSucceeded:
		if err := s.completeRefund(ctx, rf, res.Result); err != nil {
			return err // sent again later: the gateway answers the same, and it is stored then
		}
		return nil
	case res.Outcome.NotSent(), res.Outcome.MayHaveProcessed(), res.Outcome == payrouter.OutcomePending:
		return fmt.Errorf("%w: refund %s: %s", fallback.ErrLater, rf.ID, res.Outcome)
	default: // declined, error: sending it again would be refused again
		s.failRefund(ctx, rf, whyRefused(res.Result))
		return nil
	}
}

// ErrNoRefund is the answer for a refund id that does not exist, or that the caller may not see.
func ErrNoRefund(id string) error { return payrouter.Errorf(payrouter.ENotFound, "no refund %q", id) }

// GetRefund returns a stored refund, ENotFound when there is none with that id.
func (s *Settler) GetRefund(ctx context.Context, id string) (*payrouter.Refund, error) {
	if s.refunds == nil {
		return nil, ErrNoRefund(id)
	}
	rf, err := s.refunds.Refund(ctx, id)
	if errors.Is(err, payrouter.ErrNotFound) {
		return nil, ErrNoRefund(id)
	}
	return rf, err
}

// Refresh returns a charge as GET /charge/{id} shows it: the stored charge, and for one still
// processing what its gateway says of it now. When the gateway cannot be asked, the status
// fallback answers (fallback.Fallbacks.Status): the stored charge with stale true, or a
// *fallback.Unavailable.
func (s *Settler) Refresh(ctx context.Context, id string) (c *payrouter.Charge, stale bool, err error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	c, err = s.Get(ctx, id)
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
func (s *Settler) ResolveProcessing(ctx context.Context, c *payrouter.Charge) (answered bool, err error) {
	answered, _, err = s.lookUpProcessing(ctx, c)
	return answered, err
}

// lookUpProcessing is ResolveProcessing, also returning the look-up's attempt (for the answer of
// a status fallback that fails).
func (s *Settler) lookUpProcessing(ctx context.Context, c *payrouter.Charge) (answered bool, look payrouter.Attempt, err error) {
	if c.Status != payrouter.StatusProcessing {
		return true, payrouter.Attempt{}, nil
	}
	tab := s.table()
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

// moveOn sets a processing charge's status by what its gateway's look-up found (res), capturing
// an authorization the charge asked to capture (lookUpProcessing).
func (s *Settler) moveOn(ctx context.Context, tab *table, c *payrouter.Charge, gw payrouter.Gateway, res payrouter.Result) {
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
			Apply(c, c.Gateway, c.Reference, OutcomeOfState(res))
			break
		}
		// The charge asked for a capture, and only the authorization is known to have happened.
		captured, ok := s.captureProcessing(ctx, tab, c, gw, res)
		if ok {
			Apply(c, c.Gateway, c.Reference, captured)
		}
	case payrouter.TxVoided:
		c.Status = payrouter.StatusVoided
		c.GatewayReference = res.GatewayReference
	case payrouter.TxPartiallyRefunded, payrouter.TxRefunded:
		// Captured, then refunded at the gateway without payrouter: shown as the gateway has
		// it, never as plainly succeeded.
		s.log.WarnContext(ctx, "charge.refunded_elsewhere", "charge_id", c.ID, "gateway", c.Gateway, "state", res.State)
		Apply(c, c.Gateway, c.Reference, OutcomeOfState(res))
	default: // captured, declined, failed, pending, or a state that says nothing
		Apply(c, c.Gateway, c.Reference, OutcomeOfState(res))
	}
}

// storeResolved stores a charge a look-up moved on, unless it was resolved meanwhile (the
// reconciler, another GET): that one stands, and c becomes it.
func (s *Settler) storeResolved(ctx context.Context, c *payrouter.Charge) error {
	c.UpdatedAt = s.now().UTC()
	sctx, cancel := storeCtx(ctx)
	defer cancel()
	unlock := lockCharge(c.ID)
	defer unlock()
	if stored, err := s.charges.Charge(sctx, c.ID); err == nil && stored.Status != payrouter.StatusProcessing {
		*c = *stored
		return nil
	}
	if err := s.charges.SaveCharge(sctx, c); err != nil {
		return fmt.Errorf("storing resolved charge %s as %s: %w", c.ID, c.Status, err)
	}
	return nil
}

// captureProcessing captures a processing charge found authorized, with the reference Capture
// uses. ok is false when the capture did not happen (the charge stays processing, and the next
// look-up tries again).
func (s *Settler) captureProcessing(ctx context.Context, tab *table, c *payrouter.Charge, gw payrouter.Gateway, found payrouter.Result) (payrouter.Result, bool) {
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
