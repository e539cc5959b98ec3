package payments

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/routing"
)

// The settlement of a hedged charge that a hedge won while its sale's outcome was not known
// (docs/architecture.md, Hedging safely). The charge was answered succeeded at the hedge, whose
// authorization waits for its capture (CaptureQueued); the sale (payrouter.Attempt.Sale), which
// authorizes and captures in one call, may have captured meanwhile. So nothing is captured at
// the hedge before the sale's final outcome is known:
//   - the sale captured: it keeps the charge (its gateway and reference become the charge's),
//     and the hedge's authorization is voided;
//   - the sale only authorized: it is voided, then the hedge captured;
//   - the sale declined, failed, was not sent, was voided, or is not found once it cannot be on
//     its way any more: the hedge is captured (a sale not found is rechecked for RecheckFor, and
//     a late capture found then is refunded);
//   - anything else (pending, a look-up not answered): later, nothing captured.
// The sale's own answer decides when this instance has it (SaleAnswered); else the sale is looked
// up, as the reconciler looks a processing charge up.

// unsettledSale returns the index of c's sale while it may hold money and is not the attempt c
// keeps, or -1: c has no sale, keeps it, or it certainly holds nothing (not sent, declined,
// refused, found not found, declined or failed, voided).
func unsettledSale(c *payrouter.Charge) int {
	return slices.IndexFunc(c.Attempts, func(a payrouter.Attempt) bool {
		if !a.Sale || a.Reference == "" || a.Voided || a.Gateway == c.Gateway && a.Reference == c.Reference {
			return false
		}
		switch {
		case a.Outcome.NotSent(), a.Outcome == payrouter.OutcomeDeclined, a.Outcome == payrouter.OutcomeError:
			return false
		}
		switch a.Resolved {
		case payrouter.TxNotFound, payrouter.TxDeclined, payrouter.TxFailed, payrouter.TxVoided:
			return false
		}
		return true
	})
}

// settleTimeout bounds one settlement: a look-up and a void at the sale's gateway, a capture or
// void at the hedge's, and the store writes between them.
func settleTimeout(tab *table, gateway string) time.Duration {
	return 3*tab.gw.Timeout(gateway, payrouter.OpCapture) + 3*storeTimeout
}

// settleSale settles the sale c.Attempts[i] of charge c, whose queued capture is at another
// attempt (settleCapture): kept is true when the sale holds the charge's money and now keeps it
// (the hedge's authorization voided, or its void queued); false with a nil error when the sale
// holds nothing and the hedge may be captured. known is the sale's own answer when this instance
// has it.
func (s *Service) settleSale(ctx context.Context, c *payrouter.Charge, i int, known *payrouter.Result) (kept bool, err error) {
	sale := c.Attempts[i]
	tab := s.table()
	gw := tab.gw.Adapters[sale.Gateway]
	if gw == nil || tab.gw.Domains.Guard(sale.Gateway, payrouter.OpStatus) == nil {
		s.log.ErrorContext(ctx, "task.unknown_gateway", "task", payrouter.TaskCapture, "charge_id", c.ID, "gateway", sale.Gateway)
		return false, fmt.Errorf("%w: the sale's gateway %q is not configured", fallback.ErrLater, sale.Gateway)
	}
	found, certain := saleStateOf(known)
	if !certain {
		look := lookUpAttempt(ctx, tab, c, gw, sale.Gateway, sale.Reference, "")
		if look.Outcome != payrouter.OutcomeSucceeded {
			return false, fmt.Errorf("%w: the sale's status look-up %s: %s", fallback.ErrLater, look.Outcome, look.Detail)
		}
		found = look.Result
	}
	s.log.InfoContext(ctx, "charge.sale_settled", "charge_id", c.ID, "sale_gateway", sale.Gateway, "found", found.State,
		"hedge_gateway", c.Gateway, "looked_up", !certain)
	switch found.State {
	case payrouter.TxCaptured, payrouter.TxPartiallyRefunded, payrouter.TxRefunded:
		return true, s.keepSale(ctx, c, i, found)
	case payrouter.TxAuthorized:
		// Approved but not captured: released, and the hedge, which the charge was answered
		// at, captured. Until the void is confirmed nothing is captured at the hedge.
		if !s.voidAttempt(ctx, tab, gw, c, sale.Gateway, sale.Reference, found.GatewayReference) {
			return false, fmt.Errorf("%w: the sale at %s is authorized and its void was not confirmed", fallback.ErrLater, sale.Gateway)
		}
		return false, nil
	case payrouter.TxVoided, payrouter.TxDeclined, payrouter.TxFailed:
		return false, nil
	case payrouter.TxNotFound:
		if certain {
			return false, nil // not sent: never processed
		}
		// Only once it cannot be on its way any more is "not found" an answer.
		if s.now().Sub(c.CreatedAt) <= s.budget+tab.gw.Timeout(sale.Gateway, payrouter.OpCharge) {
			return false, fmt.Errorf("%w: the sale at %s is not found yet, and may still be on its way", fallback.ErrLater, sale.Gateway)
		}
		s.ReleaseLater(ctx, payrouter.TaskRecheck, c, sale.Gateway, sale.Reference, "", 0)
		return false, nil
	}
	return false, fmt.Errorf("%w: the sale at %s is %q", fallback.ErrLater, sale.Gateway, found.State)
}

// saleStateOf reads a sale's own answer: certain is false when it does not say how the sale
// ended (none, pending, timeout, unknown), and the sale is looked up.
func saleStateOf(known *payrouter.Result) (found payrouter.Result, certain bool) {
	switch {
	case known == nil:
		return payrouter.Result{}, false
	case known.Outcome == payrouter.OutcomeSucceeded:
		found = *known
		if found.State == payrouter.TxUnknown {
			found.State = payrouter.TxCaptured // a sale approved is captured, as Apply reads it
		}
		return found, true
	case known.Outcome == payrouter.OutcomeDeclined:
		return payrouter.Result{State: payrouter.TxDeclined}, true
	case known.Outcome == payrouter.OutcomeError:
		return payrouter.Result{State: payrouter.TxFailed}, true
	case known.Outcome.NotSent():
		return payrouter.Result{State: payrouter.TxNotFound}, true
	}
	return payrouter.Result{}, false
}

// keepSale makes the sale c.Attempts[i], found holding the money, the charge's attempt (its
// gateway and reference, the capture no longer queued), then voids the hedge's authorization the
// charge named, or queues its void (TaskVoid) until it is. The write is conditional on the
// version settleCapture read: payrouter.ErrStale when the charge changed meanwhile (it is settled
// again from what it is then).
func (s *Service) keepSale(ctx context.Context, c *payrouter.Charge, i int, found payrouter.Result) error {
	hedgeGateway, hedgeRef, hedgeGwRef := c.Gateway, c.Reference, c.GatewayReference
	sale := &c.Attempts[i]
	sale.Outcome, sale.Resolved = payrouter.OutcomeSucceeded, found.State
	c.CaptureQueued = false
	routing.Apply(c, sale.Gateway, sale.Reference, routing.OutcomeOfState(found))
	c.UpdatedAt = s.now().UTC()
	sctx, cancel := storeCtx(ctx)
	err := s.charges.SaveCharge(sctx, c)
	cancel()
	switch {
	case errors.Is(err, payrouter.ErrStale):
		return err
	case err != nil:
		return fmt.Errorf("%w: storing charge %s at its sale: %v", fallback.ErrLater, c.ID, err)
	}
	s.log.WarnContext(ctx, "charge.kept_at_sale", "charge_id", c.ID, "gateway", c.Gateway, "reference", c.Reference,
		"hedge_gateway", hedgeGateway, "then", "the hedge's authorization voided")
	tab := s.table()
	if gw := tab.gw.Adapters[hedgeGateway]; gw == nil || !s.voidAttempt(ctx, tab, gw, c, hedgeGateway, hedgeRef, hedgeGwRef) {
		s.ReleaseLater(ctx, payrouter.TaskVoid, c, hedgeGateway, hedgeRef, hedgeGwRef, 0)
	}
	return nil
}

// voidAttempt voids the authorization ref at gateway that c does not keep, with the reference
// every void of it carries, and marks the attempt voided in the stored charge. It reports
// whether the gateway confirmed the void.
func (s *Service) voidAttempt(ctx context.Context, tab *table, gw payrouter.Gateway, c *payrouter.Charge, gateway, ref, gwRef string) bool {
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(ref, payrouter.OpVoid), ChargeReference: ref, GatewayReference: gwRef,
		Amount: c.Amount, Currency: c.Currency,
	}
	res := tab.gw.Call(gateway, payrouter.OpVoid, req.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Void(ctx, req)
	}).Do(ctx)
	if res.Outcome != payrouter.OutcomeSucceeded {
		s.log.WarnContext(ctx, "charge.void_failed", "charge_id", c.ID, "gateway", gateway, "reference", ref,
			"outcome", res.Outcome, "detail", res.Detail)
		return false
	}
	if err := s.markVoided(ctx, c.ID, gateway, ref); err != nil {
		s.log.WarnContext(ctx, "charge.store_failed", "charge_id", c.ID, "err", err)
	}
	return true
}

// lookUpAttempt asks gateway what it knows of the charge attempt sent with ref.
func lookUpAttempt(ctx context.Context, tab *table, c *payrouter.Charge, gw payrouter.Gateway, gateway, ref, gwRef string) routing.Result {
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(ref, payrouter.OpStatus), ChargeReference: ref,
		GatewayReference: gwRef, Amount: c.Amount, Currency: c.Currency,
	}
	return tab.gw.Call(gateway, payrouter.OpStatus, req.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Status(ctx, req)
	}).Do(ctx)
}
