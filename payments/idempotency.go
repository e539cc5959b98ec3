package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrouter/payrouter"
)

// The idempotency protocol (docs/api.md, Idempotency): every operation that moves money runs at
// most once per Idempotency-Key. The key is claimed before anything is done, its hold renewed
// while the work runs, and the answer stored with the final state of what it changed, in one
// step; a completed key replays its answer, a key in flight is payrouter.ErrInFlight, a key used
// with another request payrouter.ErrMismatch. The API renders answers (Render); this package
// decides when they are stored and replayed.

// DefaultHold is Config.Hold's default: a key held by a dead or stalled instance is free again
// within 5 s (docs/api.md, Idempotency), and three renewals fit in it.
const DefaultHold = 5 * time.Second

// Request is one request with an Idempotency-Key.
type Request struct {
	// Scope is the API key scope the request acts for: the owner of what it makes, and the
	// namespace of its key.
	Scope string
	// Key is the Idempotency-Key; the stores keep its digest (payrouter.IdempotencyStoreKey).
	Key string
	// Fingerprint identifies what the request asks (the operation and its decoded body): the
	// same key with another fingerprint is a mismatch.
	Fingerprint string
}

// Answer is a complete answer, as it is sent and as an idempotency record keeps it.
type Answer struct {
	Status int
	Header map[string]string
	Body   []byte
	// Replayed is true for the answer of a key completed before.
	Replayed bool
}

// Result is what an operation came to: its charge or refund, or its error.
type Result struct {
	Charge *payrouter.Charge
	Refund *payrouter.Refund
	Err    error
}

// Render turns a Result into the answer sent for it (httpapi's views and problems).
type Render func(Result) (Answer, error)

// KeyStore keeps idempotency keys, claims one with the first version of its charge, and
// completes one with the final state of its charge, each in one step (payrouter.Store).
type KeyStore interface {
	payrouter.IdempotencyStore
	ClaimCharge(ctx context.Context, owner, key, fingerprint string, holdFor time.Duration, c *payrouter.Charge) (payrouter.Claimed, error)
	CompleteCharge(ctx context.Context, c *payrouter.Charge, h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) error
}

// claim takes a request's key (the store's form of it, payrouter.IdempotencyStoreKey) as
// payrouter.IdempotencyStore.Claim does; nil is that Claim.
type claim func(ctx context.Context, key string) (*payrouter.IdempotencyRecord, payrouter.Hold, error)

// kept reports whether the answer to an operation that came to err is stored for its key: one
// whose gateway had its say (err nil, whatever the charge's status; or the gateway refused the
// operation as malformed). Any other is not: the request itself was refused, or no gateway
// could take it, and the client may send the same key again.
func kept(err error) bool {
	return err == nil || payrouter.Code(err) == payrouter.EGatewayError
}

// operation is what runs under a key's hold: what it came to, and the charge whose final
// state is stored with the answer (nil: none).
type operation func(hold payrouter.Hold) (res Result, final *payrouter.Charge)

// current renders a replayed success from the resource as it stands now (a charge voided or
// refunded since, a queued refund applied since); ok false keeps the stored answer.
type current func(ctx context.Context) (res Result, ok bool, err error)

// idempotent runs op at most once per key (the protocol above). The answer is stored even when
// the client has gone: it is what a retry will get. The error is one the protocol met (the key
// in flight or used with another body, the store away, the hold lost): nothing was answered.
// take claims the key (nil: Claim); a new charge's claim stores the charge too (CreateCharge).
func (s *Service) idempotent(ctx context.Context, r Request, render Render, take claim, op operation, now current) (Answer, error) {
	if take == nil {
		take = func(ctx context.Context, key string) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
			return s.keys.Claim(ctx, r.Scope, key, r.Fingerprint, s.holdFor())
		}
	}
	rec, hold, err := take(ctx, payrouter.IdempotencyStoreKey(r.Scope, r.Key))
	if err != nil {
		return Answer{}, err
	}
	if rec != nil {
		return s.replay(ctx, rec, render, now)
	}
	stop := s.keepHold(ctx, hold)
	res, final := op(hold)
	stop()
	storeCtx := context.WithoutCancel(ctx)
	a, err := render(res)
	if err != nil {
		s.releaseKey(storeCtx, hold)
		return Answer{}, err
	}
	if !kept(res.Err) {
		if final != nil {
			// A gateway was called, and no gateway took it: the charge is stored, the key free.
			if err := s.charges.SaveCharge(storeCtx, final); err != nil {
				s.log.Error("charge.store_failed", "charge_id", final.ID, "status", final.Status, "err", err)
			}
		}
		s.releaseKey(storeCtx, hold)
		return a, nil
	}
	rebuilt := ""
	if now != nil && res.Charge != nil {
		rebuilt = res.Charge.ID
	}
	a, err = s.complete(storeCtx, r, hold, a, final, rebuilt, render)
	switch {
	case errors.Is(err, payrouter.ErrHoldLost):
		// A later request with this key took it while this one stalled; that request settled
		// what this one sent and holds the key's answer. Telling this client anything else
		// would be a second answer to one key.
		s.log.Warn("idempotency.hold_lost", "key_scope", r.Scope, "status", a.Status,
			"then", "the later request with this key answers for it")
		return Answer{}, err
	case err != nil:
		// Not stored: the hold runs out, and the next request with this key settles the charge
		// from the gateways' answers before it answers (Service.Charge).
		chargeID := ""
		if final != nil {
			chargeID = final.ID
		}
		s.log.Error("idempotency.store_failed", "charge_id", chargeID, "status", a.Status, "err", err)
	}
	return a, nil
}

// completeTries bounds complete's reads of a charge changed under it.
const completeTries = 4

// complete stores the answer a for hold's key, with the final state of its charge when it has
// one, in one step. A success whose answer a replay renders again from its charge (rebuilt
// names it) is stored without its body and headers (payrouter.IdempotencyRecord.ChargeID): the
// body would be a second copy of the charge, metadata and description included, kept for the
// key's whole TTL, and a replay shows the charge as it stands then anyway. A charge changed since the request last wrote it is not overwritten: one
// still processing takes the request's answer on top of what was noted meanwhile
// (payrouter.Charge.Rebase), one that moved on (resolved by a look-up while the request ran)
// stands, and the key is completed with the answer it gives now. It returns the answer stored.
func (s *Service) complete(ctx context.Context, r Request, hold payrouter.Hold, a Answer, final *payrouter.Charge, rebuilt string, render Render) (Answer, error) {
	for range completeTries {
		rec := payrouter.IdempotencyRecord{Fingerprint: r.Fingerprint, Status: a.Status, Header: a.Header, Body: a.Body, CreatedAt: s.now().UTC()}
		if rebuilt != "" && a.Status < 300 {
			// Its status says a replay renders it again; nothing else of it is needed then.
			rec.Header, rec.Body, rec.ChargeID = nil, nil, rebuilt
		}
		if final == nil {
			return a, s.keys.Complete(ctx, hold, rec, s.keysTTL)
		}
		err := s.keys.CompleteCharge(ctx, final, hold, rec, s.keysTTL)
		if !errors.Is(err, payrouter.ErrStale) {
			return a, err
		}
		stored, err := s.charges.Charge(ctx, final.ID)
		if err != nil {
			return a, err
		}
		if final.Rebase(stored) {
			continue
		}
		if a, err = render(Result{Charge: stored}); err != nil {
			return a, err
		}
		final = stored
	}
	return a, fmt.Errorf("charge %s: %w", final.ID, payrouter.ErrStale)
}

// replay answers a completed key: a success (2xx) with what now renders of the resource as it
// stands when it can, anything else with the stored answer, which is final (a decline, a
// refusal). A success stored without its body (complete) can only be rendered again: should
// its charge be gone, which the stores prevent while the key lives, the answer is that it is.
func (s *Service) replay(ctx context.Context, rec *payrouter.IdempotencyRecord, render Render, now current) (Answer, error) {
	a := Answer{Status: rec.Status, Header: rec.Header, Body: rec.Body}
	if now != nil && rec.Status < 300 {
		res, ok, err := now(ctx)
		switch {
		case err != nil:
			return Answer{}, err
		case ok:
			if a, err = render(res); err != nil {
				return Answer{}, err
			}
		case len(rec.Body) == 0:
			return Answer{}, payrouter.Errorf(payrouter.ENotFound, "the charge this Idempotency-Key was answered with is no longer kept")
		}
	}
	a.Replayed = true
	return a, nil
}

// peek answers a request that will be refused anyway (every breaker open) with one read of its
// key and no write: a key answered before replays, a key in flight is payrouter.ErrInFlight, one
// used with another body payrouter.ErrMismatch; replayed is false for a key free, whose request
// then gets its refusal, which is not stored.
func (s *Service) peek(ctx context.Context, r Request, render Render, now current) (a Answer, replayed bool, err error) {
	rec, err := s.keys.Peek(ctx, payrouter.IdempotencyStoreKey(r.Scope, r.Key), r.Fingerprint)
	if err != nil || rec == nil {
		return Answer{}, false, err
	}
	a, err = s.replay(ctx, rec, render, now)
	return a, err == nil, err
}

// holdFor is how long a key is held without renewal (Config.Hold).
func (s *Service) holdFor() time.Duration {
	if s.hold > 0 {
		return s.hold
	}
	return DefaultHold
}

// keepHold renews hold every third of its length until the returned stop is called, so that a
// live request keeps its key however long its gateways take, and a dead or stalled one loses it
// within one hold. A renewal that finds the hold lost stops: the stores refuse every later write
// made with it.
func (s *Service) keepHold(ctx context.Context, hold payrouter.Hold) (stop func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	every := s.holdFor() / 3
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, rcancel := context.WithTimeout(ctx, every)
			err := s.keys.Renew(rctx, hold, s.holdFor())
			rcancel()
			switch {
			case errors.Is(err, payrouter.ErrHoldLost):
				s.log.Warn("idempotency.hold_lost", "then", "this request's writes are refused; the later request with its key answers")
				return
			case err != nil && ctx.Err() == nil:
				s.log.Warn("idempotency.renew_failed", "err", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// releaseKey frees a held key whose answer is not stored, logging a failure: the hold then runs
// out by itself.
func (s *Service) releaseKey(ctx context.Context, hold payrouter.Hold) {
	if err := s.keys.Release(ctx, hold); err != nil {
		s.log.Warn("idempotency.release_failed", "err", err, "then", "the key is free again once its hold runs out")
	}
}
