package payments

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/routing"
)

// A refund's life is four store transitions, each written with its charge in one step
// (payrouter.RefundStore.ChangeRefund) and computed on the charge as the store last returned it:
// reserved (pending, its amount added to the charge's reservations, its safety task queued),
// queued (with the task that sends it), succeeded (its amount moved from reserved to refunded),
// failed (its reservation freed). A transition that finds the charge or the refund changed
// (payrouter.ErrStale: another refund of the same charge, the queue worker, an instance that
// stalled and resumed) reads them again and is decided anew, so that the refunds of a charge
// never add up to more than it captured and each is counted once.

// changeTries bounds how often a transition reads its charge again after finding it changed:
// each time is another writer of the same charge within milliseconds, and a charge written by
// that many at once is answered as busy rather than waited on.
const changeTries = 16

// errBusy is the answer of a transition that lost changeTries races in a row.
func errBusy(chargeID string) error {
	return payrouter.Errorf(payrouter.EState, "charge %s is being changed by other requests at the same time; send the request again", chargeID)
}

// Refund gives back amount (0: all that is left) of a succeeded charge, at the gateway that
// captured it. The refund is reserved (stored pending, its amount held against what is left of
// the charge) before it is sent, so a refund that does not fit what is left, counting refunds
// sent or queued and not answered yet, is EState at once with nothing sent or queued. It
// returns the refund, succeeded, or queued when the gateway could not take it now (or its answer
// was lost) and the refund fallback queues: the queue worker sends it again, with the same
// reference, until the gateway answers. Errors: EState when the charge is not succeeded or has
// less left than amount; a *fallback.Unavailable when the gateway could not take it and the
// fallback fails; an EGatewayError when the gateway refused it (the refund is then failed, its
// reservation freed).
//
// id names the refund ("": a new random one). httpapi derives it from the request's
// Idempotency-Key, so that a retry whose key was free again (the instance holding it died
// mid-request, after the refund was stored) finds that refund and answers it as it stands,
// instead of refunding a second time; its safety task finishes it if it is still pending. The
// same id asked for another charge or amount is EMismatch.
func (s *Service) Refund(ctx context.Context, chargeID string, amount int64, id string) (*payrouter.Refund, error) {
	return s.refund(ctx, chargeID, nil, amount, id)
}

// refund is Refund, trying first from known, the charge as the caller read it (nil: none).
func (s *Service) refund(ctx context.Context, chargeID string, known *payrouter.Charge, amount int64, id string) (*payrouter.Refund, error) {
	if amount < 0 {
		return nil, payrouter.Errorf(payrouter.EInvalid, "a refund's amount must be positive")
	}
	if s.refunds == nil {
		return nil, errors.New("refunds: no refund store configured")
	}
	if id == "" {
		id = "re_" + rand.Text()
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	tab := s.table()
	for try := range changeTries {
		c := known
		if try > 0 || c == nil {
			var err error
			if c, err = s.Get(ctx, chargeID); err != nil {
				return nil, err
			}
		}
		// A refund asked for before under this id is found by the reservation itself, which the
		// store refuses for an id taken (ErrStale): only then is it looked for.
		if try > 0 {
			if prev, found, err := s.refundAskedAgain(ctx, c, amount, id); found || err != nil {
				return prev, err
			}
		}
		gw, err := gatewayOf(tab, c)
		if err != nil {
			return nil, err
		}
		reserved, err := c.ReserveRefund(amount)
		if err != nil {
			if try == 0 {
				// Refused by what is left, unless it is one asked for before: that one stands.
				if prev, found, aerr := s.refundAskedAgain(ctx, c, amount, id); found || aerr != nil {
					return prev, aerr
				}
			}
			return nil, err
		}
		now := s.now().UTC()
		c.UpdatedAt = now
		rf := &payrouter.Refund{
			ID: id, ChargeID: c.ID, Amount: reserved, Currency: c.Currency, Status: payrouter.RefundPending,
			Gateway: c.Gateway, Owner: c.Owner, Reference: payrouter.RefundReference(id), CreatedAt: now, UpdatedAt: now,
		}
		// With the reservation, a task that finds out once this request is over, should this
		// process die before the gateway's answer is stored: it sends the refund again with the
		// same reference (applied once), or finds it settled and does nothing.
		task := refundTask(rf, now.Add(s.budget+tab.gw.Timeout(c.Gateway, payrouter.OpRefund)), now)
		err = s.refunds.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf, Charge: c, Task: &task})
		if errors.Is(err, payrouter.ErrStale) {
			continue // another refund of this charge, or this one, was stored meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("storing refund %s of charge %s before sending it: %w", rf.ID, c.ID, err)
		}
		return s.refundAnswered(ctx, tab, c, rf, sendRefund(ctx, s.log, tab, gw, c, rf))
	}
	return nil, errBusy(chargeID)
}

// refundAskedAgain looks for the refund id names, asked for before: found, it is answered as it
// stands (and queued again when it is not settled); the same id asked for another charge or
// amount is EMismatch.
func (s *Service) refundAskedAgain(ctx context.Context, c *payrouter.Charge, amount int64, id string) (prev *payrouter.Refund, found bool, err error) {
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
		// refund stored before this version queued its task apart): a task of its own, at once.
		// Sent twice, a refund is applied once (its reference).
		if s.queue == nil {
			return nil, true, fmt.Errorf("queueing refund %s again: no queue configured", id)
		}
		if _, err := s.queue.Enqueue(ctx, refundTask(prev, time.Time{}, s.now().UTC())); err != nil {
			return nil, true, fmt.Errorf("queueing refund %s again: %w", id, err)
		}
	}
	return prev, true, nil
}

// refundAnswered moves a refund on by its gateway's answer to its first sending: succeeded;
// failed when the gateway refused it; otherwise (not sent, or maybe applied) as the refund
// fallback decides (fallback.Fallbacks.Refund), with this Service's queueing and failing.
func (s *Service) refundAnswered(ctx context.Context, tab *table, c *payrouter.Charge, rf *payrouter.Refund, res routing.Result) (*payrouter.Refund, error) {
	switch {
	case res.Outcome == payrouter.OutcomeSucceeded:
		if err := s.completeRefund(ctx, rf, c, res.Result); err != nil {
			// The gateway applied it: the answer says so, and a retry of the request must not
			// become a second refund, so this is no error for the caller. The safety task
			// stores it later.
			s.log.ErrorContext(ctx, "refund.store_failed", "refund_id", rf.ID, "charge_id", c.ID, "err", err)
			rf.Status = payrouter.RefundSucceeded
		}
		return rf, nil
	case res.Outcome.Unanswered():
		return tab.fallbacks.Refund(missed(tab, payrouter.OpRefund, c, res.Attempt()), rf, fallback.RefundSteps{
			Queue: func(maybeSent bool) error { return s.queueRefund(ctx, rf, maybeSent) },
			Fail:  func(detail string) { s.failRefund(ctx, rf, c, detail) },
		})
	default: // declined, error
		s.failRefund(ctx, rf, c, whyRefused(res.Result))
		return nil, payrouter.Errorf(payrouter.EGatewayError, "%s refused refund %s of charge %s (%s)", c.Gateway, rf.ID, c.ID, whyRefused(res.Result))
	}
}

// sendRefund sends a refund through its gateway's refund guard in tab, with its own reference.
func sendRefund(ctx context.Context, log *slog.Logger, tab *table, gw payrouter.Gateway, c *payrouter.Charge, rf *payrouter.Refund) routing.Result {
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

// refundTask is the task that sends rf, not before notBefore.
func refundTask(rf *payrouter.Refund, notBefore, now time.Time) payrouter.Task {
	return payrouter.Task{
		Kind: payrouter.TaskRefund, Gateway: rf.Gateway, ChargeID: rf.ChargeID, RefundID: rf.ID,
		Amount: rf.Amount, Currency: rf.Currency, NotBefore: notBefore, CreatedAt: now,
	}
}

// queueRefund moves a pending refund to queued, with the task that sends it, in one step: a
// refund is never answered queued without its task, nor its task queued for a refund stored
// otherwise. When the refund was settled meanwhile (its safety task ran), rf becomes it and
// nothing is queued. The error is returned, and the refund stays pending (it may have been
// sent; its safety task finds out), when the queue refuses.
func (s *Service) queueRefund(ctx context.Context, rf *payrouter.Refund, maybeSent bool) error {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	var err error
	for range changeTries {
		queued := *rf
		queued.Status, queued.UpdatedAt = payrouter.RefundQueued, s.now().UTC()
		task := refundTask(&queued, time.Time{}, queued.UpdatedAt)
		err = s.refunds.ChangeRefund(ctx, payrouter.RefundChange{Refund: &queued, From: payrouter.RefundPending, Task: &task})
		if err == nil {
			*rf = queued
			s.log.InfoContext(ctx, "refund.queued", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "maybe_sent", maybeSent)
			return nil
		}
		if !errors.Is(err, payrouter.ErrStale) {
			break
		}
		stored, rerr := s.refunds.Refund(ctx, rf.ID)
		if rerr != nil {
			err = rerr
			break
		}
		if stored.Status != payrouter.RefundPending {
			*rf = *stored // settled by its safety task, or queued by it: nothing more to queue
			return nil
		}
		*rf = *stored
	}
	level := s.log.Warn
	if maybeSent {
		level = s.log.Error // the money may have moved: its safety task is all that finds out
	}
	s.obs.TaskNotQueued(payrouter.TaskRefund)
	level("refund.not_queued", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "maybe_sent", maybeSent, "err", err)
	return err
}

// completeRefund records a refund the gateway applied and moves its amount from its charge's
// reservations to its refunded amount, in one step from pending or queued: a refund found
// succeeded already (sent twice, by a worker and a request, or by two workers, or by an instance
// that stalled and resumed) is not counted again. rf becomes the refund as stored. known is the
// charge as the caller last read or wrote it (nil: none), tried first.
func (s *Service) completeRefund(ctx context.Context, rf *payrouter.Refund, known *payrouter.Charge, res payrouter.Result) error {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	return s.settleRefund(ctx, rf, known, func(done *payrouter.Refund, c *payrouter.Charge) {
		done.Status, done.Detail = payrouter.RefundSucceeded, ""
		done.GatewayReference = cmp.Or(res.GatewayReference, done.GatewayReference)
		c.RefundApplied(done.Amount)
	})
}

// failRefund records a refund that will not be sent again, and why, freeing its reservation
// (known as for completeRefund).
func (s *Service) failRefund(ctx context.Context, rf *payrouter.Refund, known *payrouter.Charge, detail string) {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	s.log.WarnContext(ctx, "refund.failed", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "detail", detail)
	err := s.settleRefund(ctx, rf, known, func(failed *payrouter.Refund, c *payrouter.Charge) {
		failed.Status, failed.Detail = payrouter.RefundFailed, detail
		c.RefundReleased(failed.Amount)
	})
	if err != nil {
		s.log.ErrorContext(ctx, "refund.store_failed", "refund_id", rf.ID, "charge_id", rf.ChargeID, "err", err)
	}
}

// settleRefund moves a pending or queued refund to its end, as end sets it and its charge. It
// tries first from rf and known as the caller holds them (no read: the caller has just written
// or read them), then, each time the move finds either changed, from both read afresh. A refund
// settled already is left as it is (its end was counted then), and rf becomes it.
func (s *Service) settleRefund(ctx context.Context, rf *payrouter.Refund, known *payrouter.Charge, end func(*payrouter.Refund, *payrouter.Charge)) error {
	stored := *rf
	for try := range changeTries {
		var c payrouter.Charge
		if try == 0 && known != nil {
			c = *known
		} else {
			r, err := s.refunds.Refund(ctx, rf.ID)
			if err != nil {
				return fmt.Errorf("reading refund %s: %w", rf.ID, err)
			}
			stored = *r
			if stored.Status == payrouter.RefundSucceeded || stored.Status == payrouter.RefundFailed {
				*rf = stored
				return nil
			}
			read, err := s.charges.Charge(ctx, stored.ChargeID)
			if err != nil {
				return fmt.Errorf("reading charge %s of refund %s: %w", stored.ChargeID, rf.ID, err)
			}
			c = *read
		}
		if stored.Status == payrouter.RefundSucceeded || stored.Status == payrouter.RefundFailed {
			*rf = stored
			return nil
		}
		next := stored
		end(&next, &c)
		next.UpdatedAt = s.now().UTC()
		c.UpdatedAt = next.UpdatedAt
		err := s.refunds.ChangeRefund(ctx, payrouter.RefundChange{Refund: &next, From: stored.Status, Charge: &c})
		if errors.Is(err, payrouter.ErrStale) {
			continue
		}
		if err != nil {
			return fmt.Errorf("storing refund %s as %s: %w", rf.ID, next.Status, err)
		}
		*rf = next
		if known != nil {
			*known = c
		}
		if next.Status == payrouter.RefundSucceeded {
			s.log.InfoContext(ctx, "refund.succeeded", "refund_id", rf.ID, "charge_id", rf.ChargeID, "gateway", rf.Gateway, "amount", rf.Amount)
		}
		return nil
	}
	return fmt.Errorf("storing refund %s: %w", rf.ID, errBusy(rf.ChargeID))
}
