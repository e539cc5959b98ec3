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
// A hedged charge authorizes first, at both gateways, and captures the approval it keeps. That
// capture is queued (TaskCapture) before the charge is answered succeeded with CaptureQueued set,
// then sent by this instance as soon as the answer is stored (captureAfterAnswer); the queue's
// worker sends it if this instance cannot (it stopped, or the gateway did not take it), from
// captureGrace on, again after every idle period of the worker until the gateway answers. Every
// send carries the reference every other capture of that authorization carries
// (payrouter.OperationReference(ref, OpCapture)), so the gateway captures it once, however many
// instances, workers and stalled holders send it.

// captureGrace is how long the queued capture of a charge waits before the worker may send it:
// the charge's own request sends it first, once its answer is stored, and that takes at most
// the request's budget, the store write of the answer, and the capture call.
func (s *Service) captureGrace(tab *table, gateway string) time.Duration {
	return s.budget + storeTimeout + tab.gw.Timeout(gateway, payrouter.OpCapture)
}

// QueueCapture queues the capture of c's authorization ref at gateway (routing.Keeper): the
// worker sends it from captureGrace on, unless the charge's own request has sent it by then. An
// error when it could not be queued: the router then captures before answering.
func (s *Service) QueueCapture(ctx context.Context, c *payrouter.Charge, gateway, ref, gwRef string) error {
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
	s.captures.Store(c.ID, t)
	return nil
}

// captureAfterAnswer sends the queued capture of charge c (answered succeeded with
// CaptureQueued) in the background, now that its answer is stored, and acknowledges its task
// when it is done; what it cannot do is left to the worker. It is bounded by the gateway's
// capture timeout and the store's: Wait waits for it.
func (s *Service) captureAfterAnswer(c *payrouter.Charge) {
	v, ok := s.captures.LoadAndDelete(c.ID)
	if !ok || !c.CaptureQueued {
		return
	}
	t := v.(payrouter.Task)
	s.late.Go(func() {
		tab := s.table()
		ctx, cancel := context.WithTimeout(context.Background(), tab.gw.Timeout(t.Gateway, payrouter.OpCapture)+2*storeTimeout)
		defer cancel()
		err := s.workCapture(ctx, t)
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
// queued for (not stored, or stored otherwise): the worker sends it, or finds nothing to do.
func (s *Service) forgetCapture(chargeID string) { s.captures.Delete(chargeID) }

// Wait waits for the captures sent in the background after their charges' answers (tests, and
// a graceful stop).
func (s *Service) Wait() { s.late.Wait() }

// workCapture sends the queued capture of a charge answered succeeded with CaptureQueued
// (TaskCapture): nil when it is done (captured, or nothing to capture any more); fallback.ErrLater
// while the charge's answer is not stored yet or the gateway cannot answer now. A capture the
// gateway refuses, where a look-up shows the authorization not captured, ends the charge: it
// becomes failed (event charge.capture_failed) and its authorization is released (TaskVoid).
func (s *Service) workCapture(ctx context.Context, t payrouter.Task) error {
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
