package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
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
func writeProblem(c echo.Context, p problem) error {
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
func unavailableProblem(c echo.Context, u *fallback.Unavailable) problem {
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

// errorProblem maps any error from below to its problem: the one place errors become statuses.
func errorProblem(c echo.Context, err error) problem {
	var u *fallback.Unavailable
	if errors.As(err, &u) {
		return unavailableProblem(c, u)
	}
	if errors.Is(err, payrouter.ErrStateUnavailable) {
		// Nothing was sent to a gateway: the same request may come again once the database
		// answers, and its Idempotency-Key goes through exactly once then.
		c.Response().Header().Set("Retry-After", strconv.Itoa(StateRetryAfterSeconds))
		if errors.Is(err, payrouter.ErrStateFull) {
			return newProblem(payrouter.EStateUnavailable,
				"payrouter's in-memory store holds state.max_charges charges that are all still moving money (or as many unexpired Idempotency-Keys); nothing was sent to a gateway; send the same request again after Retry-After")
		}
		return newProblem(payrouter.EStateUnavailable,
			"the database holding payment state does not answer; nothing was sent to a gateway; send the same request again after Retry-After")
	}
	if errors.Is(err, payrouter.ErrHoldLost) {
		return newProblem(payrouter.EConflict,
			"this request outlived its hold on the Idempotency-Key and a later request with the same key took it; send the same request again to get its answer")
	}
	code := payrouter.Code(err)
	if code == payrouter.EInternal {
		return newProblem(code, "payrouter could not complete the request; it has been logged")
	}
	return newProblem(code, payrouter.Message(err))
}

// httpErrorHandler answers echo's own errors (unknown route, wrong method, a panic) as problems.
func httpErrorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	p := newProblem(payrouter.EInternal, "payrouter could not complete the request; it has been logged")
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			p = newProblem(payrouter.ENotFound, "no such resource")
		case http.StatusMethodNotAllowed:
			p = newProblem(codeMethodNotAllowed, "this resource does not answer that method")
		case http.StatusRequestEntityTooLarge:
			p = newProblem(codePayloadTooLarge, "the body is larger than 64 KiB")
		case http.StatusUnauthorized:
			p = newProblem(payrouter.EUnauthorized, "send Authorization: Bearer <key>")
		}
	}
	_ = writeProblem(c, p)
}
