package payments

import (
	"context"
	"errors"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/routing"
)

// What the storefront API asks of a charge's life, one method per operation: httpapi
// authenticates, decodes, calls one of these with how to render what it comes to, and sends the
// answer. Each runs its Idempotency-Key's protocol (idempotency.go) and acts only for the request's
// scope: another scope's charge or refund is answered exactly as one that does not exist.

// CreateCharge runs c, a new charge (its id derived from r's key), at most once per key, and
// stores its final state with its answer. When no gateway can take it now (every candidate's
// breaker open: routing.Router.FastFail) it is answered with the fallback's refusal after one
// read of the key and no write, so that an outage at the gateways costs the database nothing.
func (s *Service) CreateCharge(ctx context.Context, r Request, c *payrouter.Charge, render Render) (Answer, error) {
	now := s.chargeNow(c.ID)
	if u, ok := s.router.FastFail(ctx, c); ok {
		a, replayed, err := s.peek(ctx, r, render, now)
		if err != nil || replayed {
			return a, err
		}
		return render(Result{Err: u})
	}
	var (
		final *payrouter.Charge
		ran   bool // this request ran the charge (not a replay, nor one refused for its key)
	)
	plan, err := s.router.Plan(c)
	if err != nil {
		// No route for it: refused under its key like any refusal, so that a key answered
		// before still replays.
		return s.idempotent(ctx, r, render, nil, func(payrouter.Hold) (Result, *payrouter.Charge) {
			return Result{Err: err}, nil
		}, now)
	}
	// The key's claim stores the charge too, as the plan left it: one write before the
	// gateway call (payrouter.Store.ClaimCharge).
	var claimed payrouter.Claimed
	claim := func(ctx context.Context, key string) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
		var err error
		claimed, err = s.keys.ClaimCharge(ctx, r.Scope, key, r.Fingerprint, s.holdFor(), c)
		return claimed.Record, claimed.Hold, err
	}
	a, err := s.idempotent(ctx, r, render, claim, func(hold payrouter.Hold) (Result, *payrouter.Charge) {
		ran = true
		c.Hold = hold
		ch, err := s.Charge(ctx, plan, c, claimed)
		final = routing.FinalState(ch, err)
		return Result{Charge: ch, Err: err}, final
	}, now)
	// A hedged charge answered succeeded with its capture queued is settled now, off the
	// customer's time (capture.go); the queue's worker does it should this fail. A replay of
	// its key leaves alone what the request that ran it queued.
	switch {
	case !ran:
	case final != nil && final.CaptureQueued:
		s.captureAfterAnswer(final)
	default:
		s.forgetCapture(c.ID)
	}
	return a, err
}

// CaptureCharge captures the authorization id (Capture) at most once per key; a replay shows
// the charge as it stands now.
func (s *Service) CaptureCharge(ctx context.Context, r Request, id string, render Render) (Answer, error) {
	return s.changeOnce(ctx, r, id, render, s.Capture)
}

// VoidCharge voids the authorization id (Void) at most once per key; a replay shows the
// charge as it stands now.
func (s *Service) VoidCharge(ctx context.Context, r Request, id string, render Render) (Answer, error) {
	return s.changeOnce(ctx, r, id, render, s.Void)
}

func (s *Service) changeOnce(ctx context.Context, r Request, id string, render Render, change func(context.Context, string) (*payrouter.Charge, error)) (Answer, error) {
	if err := s.own(ctx, r.Scope, id); err != nil {
		return Answer{}, err
	}
	return s.idempotent(ctx, r, render, nil, func(payrouter.Hold) (Result, *payrouter.Charge) {
		ch, err := change(ctx, id)
		return Result{Charge: ch, Err: err}, nil
	}, s.chargeNow(id))
}

// RefundCharge refunds amount (0: all that is left) of the charge chargeID as refund refundID
// (Refund) at most once per key; a replay shows the refund as it stands now.
func (s *Service) RefundCharge(ctx context.Context, r Request, chargeID, refundID string, amount int64, render Render) (Answer, error) {
	c, err := s.owned(ctx, r.Scope, chargeID)
	if err != nil {
		return Answer{}, err
	}
	return s.idempotent(ctx, r, render, nil, func(payrouter.Hold) (Result, *payrouter.Charge) {
		// The charge read for its owner is the first try: should a refund of it have been
		// written since, the store refuses the reservation and it is read again.
		rf, err := s.refund(ctx, chargeID, c, amount, refundID)
		return Result{Refund: rf, Err: err}, nil
	}, func(ctx context.Context) (Result, bool, error) {
		rf, err := s.refunds.Refund(ctx, refundID)
		switch {
		case errors.Is(err, payrouter.ErrNotFound):
			return Result{}, false, nil
		case err != nil:
			return Result{}, false, err
		}
		return Result{Refund: rf}, true, nil
	})
}

// Events lists scope's events (payrouter.EventStore.Events).
func (s *Service) Events(ctx context.Context, scope, after string, limit int) ([]payrouter.Event, bool, error) {
	return s.events.Events(ctx, scope, after, limit)
}

// chargeNow renders a replayed charge from the charge as it stands now, so a charge voided or
// refunded since its first answer shows so (docs/api.md, GET /charge/{id}).
func (s *Service) chargeNow(id string) current {
	return func(ctx context.Context) (Result, bool, error) {
		ch, err := s.charges.Charge(ctx, id)
		switch {
		case errors.Is(err, payrouter.ErrNotFound):
			return Result{}, false, nil // answered before a gateway was asked: the stored answer stands
		case err != nil:
			return Result{}, false, err
		}
		return Result{Charge: ch}, true, nil
	}
}

// own checks that the charge id is scope's to act on before anything is done with it.
func (s *Service) own(ctx context.Context, scope, id string) error {
	_, err := s.owned(ctx, scope, id)
	return err
}

// owned returns the charge id when it is scope's to act on.
func (s *Service) owned(ctx context.Context, scope, id string) (*payrouter.Charge, error) {
	ch, err := s.charges.Charge(ctx, id)
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return nil, ErrNoCharge(id)
	case err != nil:
		return nil, err
	case !ch.OwnedBy(scope):
		return nil, ErrNoCharge(id)
	}
	return ch, nil
}
