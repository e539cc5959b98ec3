package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/routing"
)

// A charge's first answer: the claim of its key has stored it (payrouter.Store.ClaimCharge), or
// found the charge its id names stored before (its request's instance may have died mid-call);
// then its router runs the attempts, writing for them (routing.Keeper) every save they need.

var _ routing.Keeper = (*Service)(nil)

// Charge runs a new charge c, set by plan (routing.Router.Plan), once its key is claimed as
// claimed says (payrouter.Store.ClaimCharge). When the claim stored c, its first gateway call
// needs no save of its own. Otherwise a charge with its id was stored before (claimed.Prev, or
// read now when the claim could not read it): its request's instance died mid-call and the Idempotency-Key it was sent with was free again (charge ids
// derive from the key). Such a charge may have been approved, so it is answered as it stands
// (looked up at its gateway first when still processing) and nothing is sent. One that no
// gateway took (failed) is run again, its attempts numbered on from the last, so no reference is
// reused. The same key with another amount or currency is a mismatch. Its answers are
// routing.Router.Run's; its final state is the caller's to store (routing.FinalState).
func (s *Service) Charge(ctx context.Context, plan *routing.Plan, c *payrouter.Charge, claimed payrouter.Claimed) (*payrouter.Charge, error) {
	if !claimed.Stored {
		if prev, done, err := s.existing(ctx, c, claimed.Prev); err != nil || done {
			return prev, err
		}
	}
	plan.Stored = claimed.Stored
	ch, err := s.router.Run(ctx, plan, c, s)
	if errors.Is(err, payrouter.ErrStale) {
		// Resolved by another writer (a GET that looked it up, the reconciler) before a
		// failover's next call: nothing more was sent, and it is answered as it stands.
		return s.Get(ctx, c.ID)
	}
	return ch, err
}

// existing settles c against prev, the charge stored under its id before (read now when nil)
// (Charge): done is true when it is answered as it stands.
func (s *Service) existing(ctx context.Context, c, prev *payrouter.Charge) (_ *payrouter.Charge, done bool, err error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if prev == nil {
		prev, err = s.charges.Charge(ctx, c.ID)
	}
	switch {
	case errors.Is(err, payrouter.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, true, fmt.Errorf("looking for an earlier charge %s: %w", c.ID, err)
	case prev.Amount != c.Amount || prev.Currency != c.Currency:
		return nil, true, payrouter.Errorf(payrouter.EMismatch, "charge %s was asked for with another amount or currency", c.ID)
	case prev.Status == payrouter.StatusFailed:
		c.Attempts, c.Stored = prev.Attempts, prev.Stored
		return nil, false, nil
	}
	s.log.WarnContext(ctx, "charge.asked_again", "charge_id", c.ID, "status", prev.Status,
		"why", "its Idempotency-Key was free again: the instance that held it stopped mid-request")
	if prev.Status == payrouter.StatusProcessing {
		if _, err := s.ResolveProcessing(ctx, prev); err != nil {
			s.log.WarnContext(ctx, "charge.store_failed", "charge_id", prev.ID, "err", err)
		}
	}
	return prev, true, nil
}

// SaveCharge stores a charge its attempts changed (routing.Keeper): before each gateway call.
func (s *Service) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	return s.charges.SaveCharge(ctx, c)
}

// NoteLateAnswer writes how a late attempt (late's gateway, sent with ref) ended into its stored
// charge (routing.Keeper), once the
// charge's answer is stored: a charge still stored as processing is about to be written with its
// answer, which this must not hold up, so the note waits for it, looking again after
// lateNoteWait, twice as long each time, up to storeTimeout in all (then the attempt stays as
// the answer showed it, unknown, and the money is right either way: a recheck looks it up). A
// void noted here spares that recheck its look-up.
func (s *Service) NoteLateAnswer(ctx context.Context, chargeID, ref string, late payrouter.Attempt) error {
	var processing bool
	note := func(c *payrouter.Charge, at *payrouter.Attempt) bool {
		if processing = c.Status == payrouter.StatusProcessing; processing {
			return false
		}
		at.Outcome, at.Duration, at.Voided, at.Reference = late.Outcome, late.Duration, at.Voided || late.Voided, late.Reference
		return true
	}
	wait := lateNoteWait
	for waited := time.Duration(0); ; waited += wait {
		processing = false
		if err := s.noteAttempt(ctx, chargeID, late.Gateway, ref, note); err != nil || !processing || waited >= storeTimeout {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// lateNoteWait is the first wait of NoteLateAnswer for a charge's answer to be stored.
const lateNoteWait = 10 * time.Millisecond
