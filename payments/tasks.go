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
)

// RecheckFor is how long after an attempt a gateway is still looked up for a late approval of
// it: a request that reached a gateway while its answer was lost may be processed late, and
// the money must not stay there.
const RecheckFor = 5 * time.Minute

// Handlers are the Service's handlers of the queue's tasks, by kind (fallback.Worker.Handlers):
// a queued refund is sent, an attempt no charge keeps is released, the queued capture of a
// hedged charge answered succeeded is made (capture.go). nil means done: the task is
// acknowledged. fallback.ErrLater, or any other error, leaves it in the queue to be handed out
// again; the gateway reference each sends is the same every time, so no task is ever applied
// twice at a gateway.
func (s *Service) Handlers() map[payrouter.TaskKind]fallback.Handler {
	return map[payrouter.TaskKind]fallback.Handler{
		payrouter.TaskRefund:  s.workRefund,
		payrouter.TaskVoid:    s.release,
		payrouter.TaskRecheck: s.release,
		payrouter.TaskCapture: s.workCapture,
	}
}

// reachable checks that a task's gateway can be called on the configuration in use. A gateway
// removed from the configuration: nothing can be sent there any more; the task stays for an
// instance that still knows the gateway, and ops see it in the log.
func (s *Service) reachable(ctx context.Context, t payrouter.Task, op payrouter.Operation) (*table, payrouter.Gateway, error) {
	tab := s.table()
	gw := tab.gw.Adapters[t.Gateway]
	if gw == nil || tab.gw.Domains.Guard(t.Gateway, op) == nil {
		s.log.ErrorContext(ctx, "task.unknown_gateway", "task", t.Kind, "charge_id", t.ChargeID, "gateway", t.Gateway)
		return nil, nil, fmt.Errorf("%w: gateway %q is not configured", fallback.ErrLater, t.Gateway)
	}
	return tab, gw, nil
}

// release makes sure an attempt no charge keeps holds no money at its gateway: it looks the
// attempt up, voids an authorization, refunds a capture (a late approval after a failover),
// and is done once the gateway shows nothing held.
func (s *Service) release(ctx context.Context, t payrouter.Task) error {
	keeps, decided, voided, err := s.chargeKeeps(ctx, t)
	switch {
	case err != nil:
		return fmt.Errorf("%w: reading charge %s: %v", fallback.ErrLater, t.ChargeID, err)
	case !decided:
		// Still processing: which attempt it keeps is not known until it is decided (a hedged
		// charge names its last flight until its answer is stored).
		return fmt.Errorf("%w: charge %s is still processing", fallback.ErrLater, t.ChargeID)
	case keeps:
		return nil // the charge's own attempt, or never sent: never released
	case voided:
		// Voided already, by the void its late answer got at once (a hedge's loser): the
		// gateway confirmed it holds nothing, and a look-up would be one more call for nothing.
		return nil
	}
	tab, gw, err := s.reachable(ctx, t, payrouter.OpStatus)
	if err != nil {
		return err
	}
	look := payrouter.TxRequest{
		Reference: payrouter.OperationReference(t.Reference, payrouter.OpStatus), ChargeReference: t.Reference,
		GatewayReference: t.GatewayReference, Amount: t.Amount, Currency: t.Currency,
	}
	res := tab.gw.Call(t.Gateway, payrouter.OpStatus, look.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Status(ctx, look)
	}).Do(ctx)
	if res.Outcome != payrouter.OutcomeSucceeded {
		return fmt.Errorf("%w: status look-up %s: %s", fallback.ErrLater, res.Outcome, res.Detail)
	}
	op, send := payrouter.OpVoid, gw.Void
	switch res.State {
	case payrouter.TxAuthorized:
	case payrouter.TxCaptured, payrouter.TxPartiallyRefunded:
		op, send = payrouter.OpRefund, gw.Refund // all that is left
	case payrouter.TxNotFound:
		if s.now().Sub(t.CreatedAt) < RecheckFor {
			return fallback.ErrLater
		}
		return nil
	case payrouter.TxPending, payrouter.TxUnknown:
		return fallback.ErrLater
	default: // voided, refunded, declined, failed: nothing is held
		return nil
	}
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(t.Reference, op), ChargeReference: t.Reference,
		GatewayReference: cmp.Or(res.GatewayReference, t.GatewayReference), Currency: t.Currency,
	}
	out := tab.gw.Call(t.Gateway, op, req.Reference, func(ctx context.Context) payrouter.Result { return send(ctx, req) }).Do(ctx)
	if out.Outcome != payrouter.OutcomeSucceeded {
		return fmt.Errorf("%w: %s %s: %s", fallback.ErrLater, op, out.Outcome, out.Detail)
	}
	s.log.WarnContext(ctx, "charge.stray_released", "charge_id", t.ChargeID, "gateway", t.Gateway, "reference", t.Reference,
		"found", res.State, "did", op, "task", t.Kind)
	if err := s.markVoided(ctx, t.ChargeID, t.Gateway, t.Reference); err != nil {
		s.log.WarnContext(ctx, "charge.store_failed", "charge_id", t.ChargeID, "err", err)
	}
	return nil
}

// chargeKeeps reports whether the attempt a task names is the one its charge keeps: a hedge
// queued for a recheck that then won. Releasing it would refund the customer's own purchase.
// decided is false while the charge is still processing: the attempt it names then is only where
// a look-up would go (the last flight of a hedge, until the charge's answer is stored), and the
// task waits for it to be decided; and while the task's attempt is the sale of a charge whose
// queued capture is not settled yet (settle.go). voided is true when the charge shows the attempt voided
// (payrouter.Attempt.Voided: its gateway confirmed the void).
func (s *Service) chargeKeeps(ctx context.Context, t payrouter.Task) (keeps, decided, voided bool, err error) {
	c, err := s.charges.Charge(ctx, t.ChargeID)
	if errors.Is(err, payrouter.ErrNotFound) {
		return false, true, false, nil // never stored: it kept nothing
	}
	if err != nil {
		return false, false, false, err
	}
	voided = slices.ContainsFunc(c.Attempts, func(a payrouter.Attempt) bool {
		return a.Voided && a.Gateway == t.Gateway && a.Reference == t.Reference
	})
	sent := c.Gateway == t.Gateway && c.Reference == t.Reference || slices.ContainsFunc(c.Attempts, func(a payrouter.Attempt) bool {
		return a.Gateway == t.Gateway && a.Reference == t.Reference
	})
	switch {
	case c.Status == payrouter.StatusProcessing:
		return false, false, voided, nil
	case !sent:
		// A decided charge records the reference of every attempt that may have been sent
		// (routing: a flight's reference is in every save from its launch on, and cleared only
		// once its gateway is known never to have been called): this one never was, and
		// nothing can be held for it. Looking it up would only find it not found, again and
		// again for RecheckFor.
		return true, true, voided, nil
	case c.CaptureQueued && slices.ContainsFunc(c.Attempts, func(a payrouter.Attempt) bool {
		return a.Sale && a.Gateway == t.Gateway && a.Reference == t.Reference
	}) && unsettledSale(c) >= 0:
		// The sale of a charge a hedge won, not settled yet: the settlement decides which of
		// the two the charge keeps (settle.go).
		return false, false, voided, nil
	case c.Gateway != t.Gateway || c.Reference != t.Reference:
		return false, true, voided, nil
	case c.Status == payrouter.StatusDeclined, c.Status == payrouter.StatusFailed:
		return false, true, voided, nil
	}
	return true, true, voided, nil
}

// markVoided marks the attempt with that reference as voided in its stored charge, so that GET
// /charge/{id} tells the whole story.
func (s *Service) markVoided(ctx context.Context, chargeID, gateway, ref string) error {
	return s.noteAttempt(ctx, chargeID, gateway, ref, func(c *payrouter.Charge, at *payrouter.Attempt) bool {
		if at.Voided {
			return false
		}
		at.Voided = true
		return true
	})
}

// noteAttempt changes, by note, the attempt (gateway, ref) of the stored charge chargeID, and
// stores it when note says it changed anything, reading it again when it changed meanwhile.
func (s *Service) noteAttempt(ctx context.Context, chargeID, gateway, ref string, note func(*payrouter.Charge, *payrouter.Attempt) bool) error {
	for range changeTries {
		c, err := s.charges.Charge(ctx, chargeID)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(c.Attempts, func(a payrouter.Attempt) bool { return a.Gateway == gateway && a.Reference == ref })
		if i < 0 || !note(c, &c.Attempts[i]) {
			return nil
		}
		c.UpdatedAt = s.now().UTC()
		if err := s.charges.SaveCharge(ctx, c); !errors.Is(err, payrouter.ErrStale) {
			return err
		}
	}
	return errBusy(chargeID)
}

// ReleaseLater queues the release of an attempt no charge keeps: kind TaskVoid for an approval
// to void, TaskRecheck for an attempt found not processed that may yet be processed late. It
// is started no sooner than after. A task that cannot be queued is logged loudly and counted
// (Observer.TaskNotQueued): ops must look at that gateway's ledger.
func (s *Service) ReleaseLater(ctx context.Context, kind payrouter.TaskKind, c *payrouter.Charge, gateway, ref, gwRef string, after time.Duration) {
	now := s.now().UTC()
	t := payrouter.Task{
		Kind: kind, Gateway: gateway, ChargeID: c.ID, Reference: ref, GatewayReference: gwRef,
		Amount: c.Amount, Currency: c.Currency, NotBefore: now.Add(after), CreatedAt: now,
	}
	if s.queue == nil {
		s.obs.TaskNotQueued(kind)
		s.log.ErrorContext(ctx, "task.not_queued", "task", kind, "charge_id", c.ID, "gateway", gateway, "reference", ref, "err", "no queue configured")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := s.queue.Enqueue(ctx, t); err != nil {
		s.obs.TaskNotQueued(kind)
		s.log.ErrorContext(ctx, "task.not_queued", "task", kind, "charge_id", c.ID, "gateway", gateway, "reference", ref, "err", err)
	}
}
