package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/payments"
	"github.com/payrouter/payrouter/telemetry"
)

// problem is an RFC 9457 problem document with payrouter's extensions.
type problem struct {
	Type        string        `json:"type"`
	Title       string        `json:"title"`
	Status      int           `json:"status"`
	Detail      string        `json:"detail"`
	Errors      []fieldError  `json:"errors,omitempty"`
	ChargeID    string        `json:"charge_id,omitempty"`
	Gateway     string        `json:"gateway,omitempty"`
	DeclineCode string        `json:"decline_code,omitempty"`
	Attempts    []attemptView `json:"attempts,omitempty"`
	OpenUntil   *string       `json:"open_until,omitempty"`
	RetryAfter  *int64        `json:"retry_after_ms,omitempty"`
	// Charge is the charge as it stands, on a 409 invalid-charge-state to an operation on it:
	// what the caller decides anew from.
	Charge *chargeView `json:"charge,omitempty"`
}

// fieldError names one thing wrong with a request body. Its message never repeats the value.
type fieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// problemTypes is the one table from error code to HTTP status and title.
var problemTypes = map[payrouter.ErrorCode]struct {
	status int
	title  string
}{
	payrouter.EInvalid:             {http.StatusBadRequest, "The request is not valid"},
	payrouter.EUnauthorized:        {http.StatusUnauthorized, "Missing or unknown credentials"},
	payrouter.EDeclined:            {http.StatusPaymentRequired, "The card was declined"},
	payrouter.ENotFound:            {http.StatusNotFound, "Not found"},
	payrouter.EConflict:            {http.StatusConflict, "A request with this Idempotency-Key is still in flight"},
	payrouter.EState:               {http.StatusConflict, "The charge's state does not allow this"},
	payrouter.EMismatch:            {http.StatusUnprocessableEntity, "This Idempotency-Key was used with another request"},
	payrouter.EGatewayError:        {http.StatusBadGateway, "The gateway refused the request"},
	payrouter.EGatewaysUnavailable: {http.StatusServiceUnavailable, "No gateway can take this request now"},
	payrouter.EStateUnavailable:    {http.StatusServiceUnavailable, "The money state store does not answer"},
	payrouter.EInternal:            {http.StatusInternalServerError, "Internal error"},
	codePayloadTooLarge:            {http.StatusRequestEntityTooLarge, "The request body is too large"},
	codeUnsupportedMedia:           {http.StatusUnsupportedMediaType, "The request body must be application/json"},
	codeForbidden:                  {http.StatusForbidden, "Forbidden"},
	codeMethodNotAllowed:           {http.StatusMethodNotAllowed, "Method not allowed"},
	codeInvalidConfig:              {http.StatusUnprocessableEntity, "The configuration file was refused; the running configuration stays"},
	codeRateLimited:                {http.StatusTooManyRequests, "Too many requests"}, // limits.go
}

// Codes only the HTTP layer has.
const (
	codePayloadTooLarge  payrouter.ErrorCode = "payload-too-large"
	codeUnsupportedMedia payrouter.ErrorCode = "unsupported-media-type"
	codeForbidden        payrouter.ErrorCode = "forbidden"
	codeMethodNotAllowed payrouter.ErrorCode = "method-not-allowed"
	codeInvalidConfig    payrouter.ErrorCode = "invalid-config"
)

// StateRetryAfterSeconds is the Retry-After of a 503 state-unavailable: a database restart or
// failover takes seconds, and a client that retries sooner only adds load.
const StateRetryAfterSeconds = 2

// newProblem is the problem for an error code with a caller-safe detail.
func newProblem(code payrouter.ErrorCode, detail string) problem {
	t, ok := problemTypes[code]
	if !ok {
		code, t = payrouter.EInternal, problemTypes[payrouter.EInternal]
	}
	return problem{Type: "/problems/" + string(code), Title: t.title, Status: t.status, Detail: detail}
}

// writeProblem sends p as application/problem+json.
func writeProblem(c *echo.Context, p problem) error {
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return c.Blob(p.Status, "application/problem+json", body)
}

// invalid is a 400 invalid-request carrying the field errors.
func invalid(detail string, errs ...fieldError) problem {
	p := newProblem(payrouter.EInvalid, detail)
	p.Errors = errs
	return p
}

// unavailableProblem is the honest 503 of a fallback that fails, with Retry-After.
func unavailableProblem(c *echo.Context, u *fallback.Unavailable) problem {
	p := newProblem(payrouter.EGatewaysUnavailable,
		"every candidate gateway is open, full or unavailable; send the same request again after Retry-After")
	p.ChargeID = u.ChargeID
	p.Attempts = attemptViews(u.Attempts)
	if p.Attempts == nil {
		p.Attempts = []attemptView{}
	}
	if !u.OpenUntil.IsZero() {
		s := u.OpenUntil.UTC().Format(time.RFC3339)
		p.OpenUntil = &s
	}
	ms := u.RetryAfter.Milliseconds()
	p.RetryAfter = &ms
	c.Response().Header().Set("Retry-After", strconv.Itoa(u.RetryAfterSeconds()))
	return p
}

// internalDetail is an error a handler answers as internal (500, logged) whatever its cause, with
// a detail that says more than the generic one (what was left unchanged, what to do).
type internalDetail struct {
	detail string
	err    error
}

func (e *internalDetail) Error() string { return e.err.Error() }
func (e *internalDetail) Unwrap() error { return e.err }

// withDetail marks err as internal with a caller-facing detail of its own.
func withDetail(err error, detail string) error { return &internalDetail{detail: detail, err: err} }

// internalDetailDefault is the detail of an internal error that says nothing more.
const internalDetailDefault = "payrouter could not complete the request; it has been logged"

// stateFullDetail is the detail of a new charge or Idempotency-Key refused because its API key
// holds its share of the in-memory store: what it is, why nothing more of it could go, and
// what the client and the operator can do.
const stateFullDetail = "this API key holds its whole share of payrouter's in-memory store (state.max_memory, split equally among the API keys), " +
	"and none of it may go yet: authorizations awaiting capture or void, captured charges with money left to refund, answers kept for their Idempotency-Key's TTL; " +
	"other API keys are not affected; nothing was sent to a gateway; send the same request again after Retry-After, capture or void what waits, or ask the operator to raise state.max_memory"

// errorProblem is the one place an error from below becomes what the caller sees and what the
// log says. It returns err's problem (setting Retry-After on a 503) and logs err under event, once,
// with the request's context, exactly when it is internal: an outage of the money store (logged
// by the store when it goes down), a fallback that fails, a hold lost, a key in flight or used
// with another body, and every coded error (not found, declined, invalid, ...) are answers, not
// faults, and are not logged.
func (s *server) errorProblem(c *echo.Context, event string, err error) problem {
	var u *fallback.Unavailable
	var detailed *internalDetail
	switch {
	case errors.As(err, &detailed):
		// A handler's own decision: internal whatever the cause (the admin API answers an
		// outage of the state store as 500, as documented).
		s.logInternal(c, event, err)
		return newProblem(payrouter.EInternal, detailed.detail)
	case errors.As(err, &u):
		return unavailableProblem(c, u)
	case errors.Is(err, payrouter.ErrStateUnavailable):
		// Nothing was sent to a gateway: the same request may come again once the database
		// answers, and its Idempotency-Key goes through exactly once then.
		c.Response().Header().Set("Retry-After", strconv.Itoa(StateRetryAfterSeconds))
		if errors.Is(err, payrouter.ErrStateFull) {
			// A limit like any other (docs/limits.md): counted with them, and only this key's.
			if s.Metrics != nil {
				s.Metrics.RateLimited(telemetry.LimitKeyMemory)
			}
			return newProblem(payrouter.EStateUnavailable, stateFullDetail)
		}
		return newProblem(payrouter.EStateUnavailable,
			"the database holding payment state does not answer; nothing was sent to a gateway; send the same request again after Retry-After")
	case errors.Is(err, payrouter.ErrHoldLost):
		return newProblem(payrouter.EConflict,
			"this request outlived its hold on the Idempotency-Key and a later request with the same key took it; send the same request again to get its answer")
	case errors.Is(err, payrouter.ErrStale):
		p := newProblem(payrouter.EState,
			"the charge was changed by another request at the same time; nothing was sent to a gateway; read it again and decide anew")
		p.Charge = s.chargeAsItStands(c)
		return p
	case errors.Is(err, payrouter.ErrInFlight):
		return newProblem(payrouter.EConflict, "the first request with this Idempotency-Key has not completed; retry once it has")
	case errors.Is(err, payrouter.ErrMismatch):
		return newProblem(payrouter.EMismatch, "this Idempotency-Key was used with another request body; use a new key for a new request")
	case payrouter.Code(err) == payrouter.EState:
		p := newProblem(payrouter.EState, payrouter.Message(err))
		p.Charge = s.chargeAsItStands(c)
		return p
	case payrouter.Code(err) != payrouter.EInternal:
		return newProblem(payrouter.Code(err), payrouter.Message(err))
	}
	s.logInternal(c, event, err)
	return newProblem(payrouter.EInternal, internalDetailDefault)
}

// logInternal logs an internal error under event with what the request is about: its id, and the
// charge or refund it names once payrouter knows it is one (the caller's text otherwise could be
// anything, a credential pasted in the wrong place included).
func (s *server) logInternal(c *echo.Context, event string, err error) {
	attrs := []slog.Attr{
		slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
		slog.String("method", c.Request().Method),
		slog.String("route", c.Path()),
	}
	chargeID, _ := c.Get("charge_id").(string)
	if chargeID == "" && looksLikeID(c.Param("id"), "ch_") {
		chargeID = c.Param("id")
	}
	if chargeID != "" {
		attrs = append(attrs, slog.String("charge_id", chargeID))
	}
	refundID, _ := c.Get("refund_id").(string)
	if refundID == "" && looksLikeID(c.Param("id"), "re_") {
		refundID = c.Param("id")
	}
	if refundID != "" {
		attrs = append(attrs, slog.String("refund_id", refundID))
	}
	attrs = append(attrs, slog.String("err", err.Error()))
	s.Log.LogAttrs(c.Request().Context(), slog.LevelError, event, attrs...)
}

// writeError answers err as its problem (errorProblem, which logs it under event when internal).
func (s *server) writeError(c *echo.Context, event string, err error) error {
	return writeProblem(c, s.errorProblem(c, event, err))
}

// chargeAsItStands is the charge an operation's path names (/charge/{id}/...), as stored now,
// when the request's key owns it; nil otherwise, or when it cannot be read.
func (s *server) chargeAsItStands(c *echo.Context) *chargeView {
	id := c.Param("id")
	if s.Store == nil || !looksLikeID(id, "ch_") {
		return nil
	}
	ch, err := s.Store.Charge(c.Request().Context(), id)
	if err != nil || !ch.OwnedBy(scopeOf(c)) {
		return nil
	}
	v := viewOf(ch)
	return &v
}

// errorAnswer is err's problem as an answer, for the work of an idempotent request.
func (s *server) errorAnswer(c *echo.Context, event string, err error) (payments.Answer, error) {
	p := s.errorProblem(c, event, err)
	return jsonAnswer(p.Status, "application/problem+json", p)
}

// httpErrorHandler answers echo's own errors (unknown route, wrong method) as problems, and any
// error a handler returned instead of answering (errorProblem: logged as internal).
func (s *server) httpErrorHandler(c *echo.Context, err error) {
	if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Committed {
		// The answer is on its way: the error is writing it (the client went away), which
		// changes nothing the caller could act on.
		s.Log.LogAttrs(c.Request().Context(), slog.LevelInfo, "http.write_failed",
			slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)), slog.String("err", err.Error()))
		return
	}
	// echo's errors carry their status (echo.ErrNotFound and the like, *echo.HTTPError); 0 for
	// any other error.
	var p problem
	switch echo.StatusCode(err) {
	case http.StatusNotFound:
		p = newProblem(payrouter.ENotFound, "no such resource")
	case http.StatusMethodNotAllowed:
		p = newProblem(codeMethodNotAllowed, "this resource does not answer that method")
	case http.StatusRequestEntityTooLarge:
		p = newProblem(codePayloadTooLarge, "the body is larger than 64 KiB")
	case http.StatusUnauthorized:
		p = newProblem(payrouter.EUnauthorized, "send Authorization: Bearer <key>")
	default:
		p = s.errorProblem(c, "http.failed", err)
	}
	if werr := writeProblem(c, p); werr != nil {
		s.Log.LogAttrs(c.Request().Context(), slog.LevelInfo, "http.write_failed",
			slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)), slog.String("err", werr.Error()))
	}
}
