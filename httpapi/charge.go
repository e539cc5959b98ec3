package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/cardnum"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/routing"
)

// chargeView is the charge object of docs/api.md: what the storefront sees of a charge.
type chargeView struct {
	ID               string                 `json:"id"`
	Status           payrouter.ChargeStatus `json:"status"`
	Amount           int64                  `json:"amount"`
	Currency         string                 `json:"currency"`
	Country          string                 `json:"country,omitempty"`
	CustomerID       string                 `json:"customer_id,omitempty"`
	Description      string                 `json:"description,omitempty"`
	Metadata         map[string]string      `json:"metadata,omitempty"`
	Gateway          string                 `json:"gateway,omitempty"`
	GatewayReference string                 `json:"gateway_reference,omitempty"`
	DeclineCode      string                 `json:"decline_code,omitempty"`
	// AmountRefunded is what the gateway gave back so far (queued refunds are not in it yet).
	AmountRefunded int64         `json:"amount_refunded,omitempty"`
	Attempts       []attemptView `json:"attempts"`
	CreatedAt      string        `json:"created_at"`
	// Stale is true when the charge is shown as last stored because its gateway could not be
	// asked about it (fallbacks.status: degrade).
	Stale bool `json:"stale,omitempty"`
}

// attemptView is one attempt as the API shows it.
type attemptView struct {
	Gateway    string            `json:"gateway"`
	Outcome    payrouter.Outcome `json:"outcome"`
	DurationMS int64             `json:"duration_ms"`
	Resolved   payrouter.TxState `json:"resolved,omitempty"`
	Hedge      bool              `json:"hedge,omitempty"`
	Voided     bool              `json:"voided,omitempty"`
}

func attemptViews(list []payrouter.Attempt) []attemptView {
	if list == nil {
		return nil
	}
	out := make([]attemptView, len(list))
	for i, a := range list {
		out[i] = attemptView{Gateway: a.Gateway, Outcome: a.Outcome, DurationMS: a.Duration.Milliseconds(), Resolved: a.Resolved,
			Hedge: a.Hedge, Voided: a.Voided}
	}
	return out
}

func viewOf(ch *payrouter.Charge) chargeView {
	v := chargeView{
		ID: ch.ID, Status: ch.Status, Amount: ch.Amount, Currency: ch.Currency, Country: ch.Country,
		CustomerID: ch.CustomerID, Description: ch.Description, Metadata: ch.Metadata,
		Gateway: ch.Gateway, GatewayReference: ch.GatewayReference, DeclineCode: ch.DeclineCode,
		AmountRefunded: ch.Refunded, Attempts: attemptViews(ch.Attempts), CreatedAt: ch.CreatedAt.UTC().Format(time.RFC3339),
	}
	if v.Attempts == nil {
		v.Attempts = []attemptView{}
	}
	return v
}

// answer is a complete response, as it is sent and as an idempotency record keeps it.
type answer struct {
	status int
	header map[string]string
	body   []byte
	// charge, when set, is a charge whose final state idempotent stores with the answer, in one
	// step (the Router leaves it: routing.FinalState).
	charge *payrouter.Charge
}

// storedStatuses are the answers kept for their idempotency key: those given once a gateway was
// asked. 400-level answers to the request itself and 503 (no gateway took it) are not kept, so
// the client may send the same key again.
var storedStatuses = map[int]bool{
	http.StatusOK: true, http.StatusCreated: true, http.StatusAccepted: true,
	http.StatusPaymentRequired: true, http.StatusBadGateway: true,
}

// readJSONBody checks the media type and size and returns the body, or the problem to answer.
func readJSONBody(c echo.Context) ([]byte, *problem) {
	mt, _, err := mime.ParseMediaType(c.Request().Header.Get(echo.HeaderContentType))
	if err != nil || mt != "application/json" {
		p := newProblem(codeUnsupportedMedia, "send the body as Content-Type: application/json")
		return nil, &p
	}
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxBodyBytes+1))
	if err != nil {
		p := invalid("the body could not be read")
		return nil, &p
	}
	if len(body) > MaxBodyBytes {
		p := newProblem(codePayloadTooLarge, "the body is larger than 64 KiB")
		return nil, &p
	}
	return body, nil
}

// idempotencyKey returns the request's Idempotency-Key: 1 to 255 printable ASCII characters,
// and no card number. The key itself goes no further than this package: the stores keep its
// digest (payrouter.IdempotencyStoreKey), and ids derive from it (chargeIDFor).
func idempotencyKey(c echo.Context) (string, *problem) {
	key := c.Request().Header.Get("Idempotency-Key")
	if cardnum.Contains(key) {
		p := invalid("the Idempotency-Key looks like a card number; send a key of your own making, such as a UUID",
			fieldError{Field: "Idempotency-Key", Message: cardNumberRefusal})
		return "", &p
	}
	ok := len(key) >= 1 && len(key) <= 255
	for i := 0; ok && i < len(key); i++ {
		ok = key[i] >= 0x20 && key[i] <= 0x7e
	}
	if !ok {
		p := invalid("send an Idempotency-Key header of 1 to 255 printable ASCII characters",
			fieldError{Field: "Idempotency-Key", Message: "is required: 1 to 255 printable ASCII characters"})
		return "", &p
	}
	return key, nil
}

// fingerprint identifies a request for its idempotency key: the operation and the decoded body,
// so that the same request sent with other white space or member order still replays.
func fingerprint(op string, v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(append([]byte(op+"\n"), b...))
	return hex.EncodeToString(sum[:])
}

// idempotent runs work at most once per idempotency key: a completed key replays its answer
// (re-rendered by current, when given, so that a replay shows the charge or refund as it stands
// now), a key in flight is 409, a key used with another request is 422. The key is held while
// work runs and the hold renewed, so that a key whose holder died or stalled is free again
// within one hold (Deps.Hold); the answer is stored with the hold as its fence, so a holder that
// lost its key to a later request changes nothing.
func (s *server) idempotent(c echo.Context, key, fp string, work func(hold payrouter.Hold) (answer, error), current func(ctx context.Context) (answer, bool, error)) error {
	ctx := c.Request().Context()
	storeKey := payrouter.IdempotencyStoreKey(scopeOf(c), key)
	rec, hold, err := s.Store.Claim(ctx, storeKey, fp, s.holdFor())
	if err != nil || rec != nil {
		return s.answerTaken(c, "idempotency.claim_failed", rec, err, current)
	}

	stop := s.keepHold(ctx, hold)
	a, err := work(hold)
	stop()
	// The answer is stored even when the client has gone: it is what a retry will get.
	storeCtx := context.WithoutCancel(ctx)
	if err != nil {
		s.release(storeCtx, hold)
		return err
	}
	if storedStatuses[a.status] {
		a, err = s.complete(storeCtx, c, hold, fp, a)
		switch {
		case errors.Is(err, payrouter.ErrHoldLost):
			// A later request with this key took it while this one stalled; that request
			// settled what this one sent and holds the key's answer. Telling this client
			// anything else would be a second answer to one key.
			s.Log.Warn("idempotency.hold_lost", "key_scope", scopeOf(c), "status", a.status,
				"then", "the later request with this key answers for it")
			return s.writeError(c, "idempotency.complete_failed", err)
		case err != nil:
			// Not stored: the hold runs out, and the next request with this key settles the
			// charge from the gateways' answers before it answers (settle.Settler.Charge).
			chargeID := ""
			if a.charge != nil {
				chargeID = a.charge.ID
			}
			s.Log.Error("idempotency.store_failed", "charge_id", chargeID, "status", a.status, "err", err)
		}
	} else {
		if a.charge != nil {
			if err := s.Store.SaveCharge(storeCtx, a.charge); err != nil {
				s.Log.Error("charge.store_failed", "charge_id", a.charge.ID, "status", a.charge.Status, "err", err)
			}
		}
		s.release(storeCtx, hold)
	}
	for k, v := range a.header {
		c.Response().Header().Set(k, v)
	}
	return c.Blob(a.status, a.header[echo.HeaderContentType], a.body)
}

// complete stores the answer a for hold's key, with the final state of its charge when it has
// one, in one step. A charge changed since the request last wrote it is not overwritten: one
// still processing takes the request's answer on top of what was noted meanwhile (payrouter.
// Charge.Rebase), one that moved on (resolved by a look-up while the request ran) stands, and
// the key is completed with the answer it gives now. It returns the answer stored.
func (s *server) complete(ctx context.Context, c echo.Context, hold payrouter.Hold, fp string, a answer) (answer, error) {
	for range completeTries {
		r := payrouter.IdempotencyRecord{Fingerprint: fp, Status: a.status, Header: a.header, Body: a.body, CreatedAt: time.Now().UTC()}
		if a.charge == nil {
			return a, s.Store.Complete(ctx, hold, r, s.IdempotencyTTL)
		}
		err := s.Store.CompleteCharge(ctx, a.charge, hold, r, s.IdempotencyTTL)
		if !errors.Is(err, payrouter.ErrStale) {
			return a, err
		}
		stored, err := s.Store.Charge(ctx, a.charge.ID)
		if err != nil {
			return a, err
		}
		if a.charge.Rebase(stored) {
			continue
		}
		now, err := s.chargeAnswer(c, stored, nil)
		if err != nil {
			return a, err
		}
		now.charge = stored
		a = now
	}
	return a, fmt.Errorf("charge %s: %w", a.charge.ID, payrouter.ErrStale)
}

// completeTries bounds complete's reads of a charge changed under it.
const completeTries = 4

// answerTaken answers a key that Claim or Peek did not give to this request: its replay (rec),
// 409 while it is in flight, 422 when it was used with another body, or the store's error
// (logged under event when it is not an outage).
func (s *server) answerTaken(c echo.Context, event string, rec *payrouter.IdempotencyRecord, err error, current func(ctx context.Context) (answer, bool, error)) error {
	if err != nil {
		return s.writeError(c, event, err) // in flight: 409; used with another body: 422
	}
	return s.replay(c, rec, current)
}

// replay answers a completed key: a success (2xx) with what current renders of the resource as
// it stands now when it can (a charge voided or refunded since shows so, a queued refund shows
// applied), anything else with the stored answer, which is final (a decline, a refusal).
func (s *server) replay(c echo.Context, rec *payrouter.IdempotencyRecord, current func(ctx context.Context) (answer, bool, error)) error {
	a := answer{status: rec.Status, header: rec.Header, body: rec.Body}
	if current != nil && rec.Status < 300 {
		now, ok, err := current(c.Request().Context())
		if err != nil {
			return s.writeError(c, "idempotency.replay_failed", err)
		}
		if ok {
			a = now
		}
	}
	for k, v := range a.header {
		c.Response().Header().Set(k, v)
	}
	c.Response().Header().Set("Idempotent-Replayed", "true")
	return c.Blob(a.status, a.header[echo.HeaderContentType], a.body)
}

// holdFor is how long a key is held without renewal (Deps.Hold).
func (s *server) holdFor() time.Duration {
	if s.Hold > 0 {
		return s.Hold
	}
	return DefaultHold
}

// keepHold renews hold every third of its length until the returned stop is called, so that a
// live request keeps its key however long its gateways take, and a dead or stalled one loses it
// within one hold. A renewal that finds the hold lost stops: the stores refuse every later write
// made with it.
func (s *server) keepHold(ctx context.Context, hold payrouter.Hold) (stop func()) {
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
			err := s.Store.Renew(rctx, hold, s.holdFor())
			rcancel()
			switch {
			case errors.Is(err, payrouter.ErrHoldLost):
				s.Log.Warn("idempotency.hold_lost", "then", "this request's writes are refused; the later request with its key answers")
				return
			case err != nil && ctx.Err() == nil:
				s.Log.Warn("idempotency.renew_failed", "err", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// release frees a held key whose answer is not stored, logging a failure: the hold then runs
// out by itself.
func (s *server) release(ctx context.Context, hold payrouter.Hold) {
	if err := s.Store.Release(ctx, hold); err != nil {
		s.Log.Warn("idempotency.release_failed", "err", err, "then", "the key is free again once its hold runs out")
	}
}

// jsonAnswer encodes v as an answer with the given content type.
func jsonAnswer(status int, contentType string, v any, header ...string) (answer, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: status, body: body, header: map[string]string{echo.HeaderContentType: contentType}}
	for i := 0; i+1 < len(header); i += 2 {
		a.header[header[i]] = header[i+1]
	}
	return a, nil
}

// createCharge is POST /charge.
func (s *server) createCharge(c echo.Context) error {
	body, p := readJSONBody(c)
	if p != nil {
		return writeProblem(c, *p)
	}
	key, p := idempotencyKey(c)
	if p != nil {
		return writeProblem(c, *p)
	}
	in, errs, err := decodeCharge(body)
	if err != nil {
		return writeProblem(c, invalid("the charge is not valid; see errors", errs...))
	}
	if in.Gateway != "" && s.Domains.Guard(in.Gateway, payrouter.OpCharge) == nil {
		return writeProblem(c, invalid("the charge is not valid; see errors",
			fieldError{Field: "gateway", Message: "is not a configured gateway"}))
	}
	scope := scopeOf(c)
	id := chargeIDFor(scope, key)
	c.Set("charge_id", id) // for the request's span and the audit line
	fp := fingerprint("POST /charge", in)
	if u, ok := s.Settler.FastFail(c.Request().Context(), chargeOf(id, scope, in, payrouter.Hold{})); ok {
		return s.fastFail(c, key, fp, u, s.currentCharge(c, id))
	}
	return s.idempotent(c, key, fp, func(hold payrouter.Hold) (answer, error) {
		return s.runCharge(c, id, scope, in, hold)
	}, s.currentCharge(c, id))
}

// fastFail answers a charge no gateway can take now (settle.Settler.FastFail) with one read of
// the database and no write: a key answered before replays, a key in flight is 409, one used
// with another body 422, and any other gets the honest 503, which is not stored (the client
// sends the same key again after Retry-After).
func (s *server) fastFail(c echo.Context, key, fp string, u *fallback.Unavailable, current func(ctx context.Context) (answer, bool, error)) error {
	rec, err := s.Store.Peek(c.Request().Context(), payrouter.IdempotencyStoreKey(scopeOf(c), key), fp)
	if err != nil || rec != nil {
		return s.answerTaken(c, "idempotency.peek_failed", rec, err, current)
	}
	a, err := s.chargeAnswer(c, nil, u)
	if err != nil {
		return err
	}
	for k, v := range a.header {
		c.Response().Header().Set(k, v)
	}
	return c.Blob(a.status, a.header[echo.HeaderContentType], a.body)
}

// chargeOf is the charge a valid request with the API key scope owner asks for, under id.
func chargeOf(id, owner string, in chargeInput, hold payrouter.Hold) *payrouter.Charge {
	return &payrouter.Charge{
		ID: id, Owner: owner, Amount: in.Amount, Currency: in.Currency, Country: in.Country,
		CustomerID: in.CustomerID, Description: in.Description, Metadata: in.Metadata,
		PaymentMethod: payrouter.PaymentMethod{Type: in.PaymentMethod.Type, Token: in.PaymentMethod.Token},
		Capture:       in.Capture, PinnedGateway: in.Gateway, Hold: hold,
	}
}

// currentCharge renders the answer to a replayed charge from the charge as it stands now, so a
// charge voided or refunded since its first answer shows so (docs/api.md, GET /charge/{id}).
func (s *server) currentCharge(c echo.Context, id string) func(ctx context.Context) (answer, bool, error) {
	return func(ctx context.Context) (answer, bool, error) {
		ch, err := s.Store.Charge(ctx, id)
		switch {
		case errors.Is(err, payrouter.ErrNotFound):
			return answer{}, false, nil // answered before a gateway was asked: the stored answer stands
		case err != nil:
			return answer{}, false, err
		}
		a, err := s.chargeAnswer(c, ch, nil)
		return a, err == nil, err
	}
}

// chargeIDFor is the id of the charge an Idempotency-Key asks for: derived from the key (and the
// API key's scope), not drawn at random, so that a retry that finds the key free again because
// the instance holding it died mid-call gets the same charge, which may have been approved,
// instead of a second one (settle.Settler.Charge). Attempt references derive from it too, so
// even a charge sent again is the same transaction at the gateway.
//
// It takes the caller's key, not its stored digest (payrouter.IdempotencyStoreKey), and must
// keep computing exactly what it did before the stores kept digests: a key claimed before an
// upgrade and retried after it must name the same charge. The id shows nothing of the key.
func chargeIDFor(scope, key string) string { return idFor("ch_", scope, key) }

// refundIDFor is the id of the refund an Idempotency-Key asks for, for the same reason
// (settle.Settler.Refund): a retry after a crash finds the refund instead of making a second.
func refundIDFor(scope, key string) string { return idFor("re_", "refund\n"+scope, key) }

// idFor derives an id with prefix from an API key's scope and an Idempotency-Key.
func idFor(prefix, scope, key string) string {
	sum := sha256.Sum256([]byte(scope + "\n" + key))
	return prefix + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16])
}

// runCharge sends a valid charge through the router and shapes its answer.
func (s *server) runCharge(c echo.Context, id, owner string, in chargeInput, hold payrouter.Hold) (answer, error) {
	ch, err := s.Settler.Charge(c.Request().Context(), chargeOf(id, owner, in, hold))
	a, aerr := s.chargeAnswer(c, ch, err)
	if aerr == nil {
		a.charge = routing.FinalState(ch, err) // a gateway was called: its final state is stored with the answer
	}
	return a, aerr
}

// chargeAnswer is the answer to a charge the router ran, and err what it returned.
func (s *server) chargeAnswer(c echo.Context, ch *payrouter.Charge, err error) (answer, error) {
	var u *fallback.Unavailable
	if errors.As(err, &u) {
		if s.Metrics != nil {
			s.Metrics.ChargeAnswered("", payrouter.StatusFailed)
			s.Metrics.FallbackUsed(payrouter.OpCharge, string(fallback.Fail))
		}
	}
	if err != nil {
		return s.errorAnswer(c, "charge.failed", err)
	}
	if s.Metrics != nil {
		s.Metrics.ChargeAnswered(ch.Gateway, ch.Status)
	}
	switch ch.Status {
	case payrouter.StatusSucceeded, payrouter.StatusRequiresCapture, payrouter.StatusVoided, payrouter.StatusRefunded,
		payrouter.StatusPartiallyRefunded:
		// Voided and refunded: a charge approved, then changed, asked for again by its key.
		return jsonAnswer(http.StatusCreated, echo.MIMEApplicationJSON, viewOf(ch))
	case payrouter.StatusProcessing:
		return jsonAnswer(http.StatusAccepted, echo.MIMEApplicationJSON, viewOf(ch), echo.HeaderLocation, "/charge/"+ch.ID)
	case payrouter.StatusDeclined:
		p := newProblem(payrouter.EDeclined, "the gateway declined the card; ask the customer for another payment method")
		p.ChargeID, p.Gateway, p.DeclineCode, p.Attempts = ch.ID, ch.Gateway, ch.DeclineCode, attemptViews(ch.Attempts)
		return jsonAnswer(p.Status, "application/problem+json", p)
	default:
		detail := "the gateway refused the request as malformed; payrouter has logged it"
		if !refusedAsMalformed(ch.Attempts) {
			// A charge first answered 202 and found later never to have been taken anywhere.
			detail = "no gateway took the charge and nothing was charged; send a new request with a new Idempotency-Key to try again"
		}
		p := newProblem(payrouter.EGatewayError, detail)
		p.ChargeID, p.Gateway, p.Attempts = ch.ID, ch.Gateway, attemptViews(ch.Attempts)
		return jsonAnswer(p.Status, "application/problem+json", p)
	}
}

// refusedAsMalformed reports whether a gateway answered one of the attempts with error.
func refusedAsMalformed(attempts []payrouter.Attempt) bool {
	for _, a := range attempts {
		if a.Outcome == payrouter.OutcomeError {
			return true
		}
	}
	return false
}

// getCharge is GET /charge/{id}: the charge's latest status, asked of its gateway while it is
// processing; marked stale when the gateway could not be asked.
func (s *server) getCharge(c echo.Context) error {
	if err := s.ownCharge(c, c.Param("id")); err != nil {
		return s.writeError(c, "charge.get_failed", err)
	}
	ch, stale, err := s.Settler.Refresh(c.Request().Context(), c.Param("id"))
	if err != nil {
		return s.writeError(c, "charge.get_failed", err)
	}
	v := viewOf(ch)
	v.Stale = stale
	return c.JSON(http.StatusOK, v)
}
