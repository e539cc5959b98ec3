package payments

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// The capture of a hedged charge, made after its answer (docs/architecture.md, Hedging safely).
// A hedged charge that asks for capture starts with a sale (authorize and capture in one call);
// the hedge only authorizes. When the hedge's authorization answers first, its capture is queued
// (TaskCapture) before the charge is answered succeeded with CaptureQueued set, and settled
// after the answer from the sale's final outcome (settle.go): a sale that captured keeps the
// charge and the hedge is voided; only a sale that holds nothing lets the hedge be captured. This
// instance settles it as soon as both the answer is stored and the sale's answer came
// (captureAfterAnswer, SaleAnswered); the queue's worker does if this instance cannot (it
// stopped, or a gateway did not answer), from captureGrace on, again after every idle period of
// the worker until it is done. Every send carries the reference every other capture (or void) of
// that authorization carries (payrouter.OperationReference), so a gateway applies it once,
// however many instances, workers and stalled holders send it.

// captureGrace is how long the queued capture of a charge waits before the worker may send it:
// the charge's own request sends it first, once its answer is stored, and that takes at most
// the request's budget, the store write of the answer, and the capture call.
func (s *Service) captureGrace(tab *table, gateway string) time.Duration {
	return s.budget + storeTimeout + tab.gw.Timeout(gateway, payrouter.OpCapture)
}

// queuedCapture is a capture QueueCapture queued, from then until this instance sends it.
type queuedCapture struct {
	task payrouter.Task // its ID set
	// awaitSale: the charge's sale was still running when the hedge won; sale is its answer
	// once SaleAnswered brought it. answered: the charge's answer is stored.
	awaitSale bool
	sale      *payrouter.Result
	answered  bool
}

// QueueCapture queues the capture of c's authorization ref at gateway (routing.Keeper): the
// worker settles it from captureGrace on, unless the charge's own instance has by then. An
// error when it could not be queued.
func (s *Service) QueueCapture(ctx context.Context, c *payrouter.Charge, gateway, ref, gwRef string, awaitSale bool) error {
	if s.queue == nil {
		return errors.New("no queue configured")
	}
	now := s.now().UTC()
	t := payrouter.Task{
		Kind: payrouter.TaskCapture, Gateway: gateway, ChargeID: c.ID, Reference: ref, GatewayReference: gwRef,
		Amount: c.Amount, Currency: c.Currency, NotBefore: now.Add(s.captureGrace(s.table(), gateway)), CreatedAt: now,
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	id, err := s.queue.Enqueue(ctx, t)
	if err != nil {
		// Not counted as a task not queued (payrouter_tasks_not_queued_total, which pages ops):
		// the router captures before the answer instead, and no money is left behind.
		return err
	}
	t.ID = id
	s.capturesMu.Lock()
	s.captures[c.ID] = &queuedCapture{task: t, awaitSale: awaitSale}
	s.capturesMu.Unlock()
	return nil
}

// SaleAnswered takes the answer of the sale of a charge a hedge won while the sale still ran
// (routing.Keeper): the charge's queued capture settles from it, now if the charge's answer is
// stored, else as soon as it is (captureAfterAnswer).
func (s *Service) SaleAnswered(chargeID string, res payrouter.Result) {
	s.capturesMu.Lock()
	q := s.captures[chargeID]
	if q == nil {
		s.capturesMu.Unlock()
		return // its answer was not stored as queued: the worker settles it
	}
	q.sale = &res
	if !q.answered {
		s.capturesMu.Unlock()
		return
	}
	delete(s.captures, chargeID)
	s.capturesMu.Unlock()
	s.settleInBackground(q)
}

// captureAfterAnswer settles the queued capture of charge c (answered succeeded with
// CaptureQueued) in the background, now that its answer is stored, or once the answer of its
// sale still running comes (SaleAnswered); what it cannot do is left to the worker.
func (s *Service) captureAfterAnswer(c *payrouter.Charge) {
	s.capturesMu.Lock()
	q := s.captures[c.ID]
	if q == nil || !c.CaptureQueued {
		delete(s.captures, c.ID)
		s.capturesMu.Unlock()
		return
	}
	q.answered = true
	if q.awaitSale && q.sale == nil {
		s.capturesMu.Unlock()
		return // SaleAnswered settles it
	}
	delete(s.captures, c.ID)
	s.capturesMu.Unlock()
	s.settleInBackground(q)
}

// settleInBackground settles a queued capture (settleCapture) and acknowledges its task when it
// is done. It is bounded by the gateways' timeouts and the store's: Wait waits for it.
func (s *Service) settleInBackground(q *queuedCapture) {
	t, sale := q.task, q.sale
	s.late.Go(func() {
		tab := s.table()
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout(tab, t.Gateway))
		defer cancel()
		var err error
		for range changeTries {
			if err = s.settleCapture(ctx, t, sale); !errors.Is(err, payrouter.ErrStale) {
				break
			}
		}
		if err != nil {
			s.log.InfoContext(ctx, "charge.capture_later", "charge_id", t.ChargeID, "gateway", t.Gateway, "reason", err,
				"then", "the queue's worker sends it again")
			return
		}
		if err := s.queue.Ack(ctx, t.ID); err != nil {
			// The worker finds it done, with no gateway call.
			s.log.WarnContext(ctx, "task.ack_failed", "task", t.Kind, "charge_id", t.ChargeID, "err", err)
		}
	})
}

// forgetCapture drops what QueueCapture kept for a charge whose answer is not the one it was
// queued for (not stored, or stored otherwise): the worker settles it, or finds nothing to do.
func (s *Service) forgetCapture(chargeID string) {
	s.capturesMu.Lock()
	delete(s.captures, chargeID)
	s.capturesMu.Unlock()
}

// Wait waits for the captures sent in the background after their charges' answers (tests, and
// a graceful stop).
func (s *Service) Wait() { s.late.Wait() }

// workCapture settles the queued capture of a charge answered succeeded with CaptureQueued
// (TaskCapture), its sale looked up: settleCapture.
func (s *Service) workCapture(ctx context.Context, t payrouter.Task) error {
	return s.settleCapture(ctx, t, nil)
}

// settleCapture settles the queued capture of a charge answered succeeded with CaptureQueued:
// nil when it is done (captured, kept at the sale, or nothing to capture any more);
// fallback.ErrLater while the charge's answer is not stored yet, its sale's outcome is not known,
// or a gateway cannot answer now; payrouter.ErrStale when the charge changed under it (settle
// again). First the sale, if the charge has one that may hold money (settleSale; sale is its
// own answer when this instance has it, else it is looked up): one that captured keeps the
// charge. Then the capture. A capture the gateway refuses, where a look-up shows the
// authorization not captured, ends the charge: it becomes failed (event charge.capture_failed)
// and its authorization is released (TaskVoid).
func (s *Service) settleCapture(ctx context.Context, t payrouter.Task, sale *payrouter.Result) error {
	c, err := s.charges.Charge(ctx, t.ChargeID)
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return nil // never stored: there is nothing it keeps
	case err != nil:
		return fmt.Errorf("%w: reading charge %s: %v", fallback.ErrLater, t.ChargeID, err)
	case c.Status == payrouter.StatusProcessing:
		// Its answer is not stored yet, or its request's instance stopped before storing it:
		// then the reconciler resolves it, and captures it itself (with the same reference).
		return fmt.Errorf("%w: charge %s is still processing", fallback.ErrLater, t.ChargeID)
	case !c.CaptureQueued || c.Gateway != t.Gateway || c.Reference != t.Reference:
		return nil // captured already, or it keeps another attempt (whose release is queued)
	}
	if i := unsettledSale(c); i >= 0 {
		if kept, err := s.settleSale(ctx, c, i, sale); err != nil || kept {
			return err
		}
	}
	tab, gw, err := s.reachable(ctx, t, payrouter.OpCapture)
	if err != nil {
		return err
	}
	req := payrouter.TxRequest{
		Reference: payrouter.OperationReference(t.Reference, payrouter.OpCapture), ChargeReference: t.Reference,
		GatewayReference: cmp.Or(c.GatewayReference, t.GatewayReference), Amount: c.Amount, Currency: c.Currency,
	}
	res := tab.gw.Call(t.Gateway, payrouter.OpCapture, req.Reference, func(ctx context.Context) payrouter.Result {
		return gw.Capture(ctx, req)
	}).Do(ctx)
	switch {
	case res.Outcome == payrouter.OutcomeSucceeded:
		return s.endCapture(ctx, c, "")
	case res.Outcome.NotSent() || res.Outcome.MayHaveBeenApplied():
		// Not taken, or not known: the same reference is sent again later.
		return fmt.Errorf("%w: capture %s: %s", fallback.ErrLater, res.Outcome, res.Detail)
	}
	// Refused. A capture sent before under the same reference (another worker, a stalled
	// instance) may have captured it, and a gateway may refuse a repeat: only a look-up that
	// shows the authorization still uncaptured makes the refusal the answer.
	look := lookUp(ctx, tab, c, gw)
	switch {
	case look.Outcome != payrouter.OutcomeSucceeded:
		return fmt.Errorf("%w: capture refused (%s), status look-up %s", fallback.ErrLater, res.Outcome, look.Outcome)
	case captureChange.reach(look.State):
		return s.endCapture(ctx, c, "")
	case look.State != payrouter.TxAuthorized && look.State != payrouter.TxVoided:
		return fmt.Errorf("%w: capture refused (%s), the gateway shows %q", fallback.ErrLater, res.Outcome, look.State)
	}
	s.log.ErrorContext(ctx, "charge.capture_failed", "charge_id", c.ID, "gateway", c.Gateway, "outcome", res.Outcome,
		"decline_code", res.DeclineCode, "detail", res.Detail, "found", look.State, "then", "failed, its authorization released")
	if err := s.endCapture(ctx, c, whyRefused(res.Result)); err != nil {
		return err
	}
	if look.State == payrouter.TxAuthorized {
		// The charge no longer keeps it (failed): the release voids it, and retries until it has.
		s.ReleaseLater(ctx, payrouter.TaskVoid, c, c.Gateway, c.Reference, c.GatewayReference, 0)
	}
	return nil
}

// endCapture stores what a queued capture came to: captured (refused ""), or refused, which
// makes the charge failed. The write is a transition from a version that still has the capture
// queued: a charge another worker ended meanwhile is left as it stands.
func (s *Service) endCapture(ctx context.Context, c *payrouter.Charge, refused string) error {
	ctx, cancel := storeCtx(ctx)
	defer cancel()
	id := c.ID
	for range changeTries {
		if !c.CaptureQueued {
			return nil
		}
		c.CaptureQueued = false
		if refused != "" {
			c.Status = payrouter.StatusFailed
			s.log.WarnContext(ctx, "charge.failed", "charge_id", id, "gateway", c.Gateway, "why", "capture "+refused)
		}
		c.UpdatedAt = s.now().UTC()
		err := s.charges.SaveCharge(ctx, c)
		if err == nil {
			return nil
		}
		if !errors.Is(err, payrouter.ErrStale) {
			return fmt.Errorf("%w: storing the capture of charge %s: %v", fallback.ErrLater, id, err)
		}
		if c, err = s.charges.Charge(ctx, id); err != nil {
			return fmt.Errorf("%w: storing the capture of charge %s: %v", fallback.ErrLater, id, err)
		}
	}
	return fmt.Errorf("%w: %v", fallback.ErrLater, errBusy(id))
}
