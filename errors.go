package payrouter

import (
	"errors"
	"fmt"
)

// ErrorCode classifies an error for the API; httpapi maps each code to a status and problem type
// in one table.
type ErrorCode string

// The error codes payrouter uses.
const (
	EInvalid      ErrorCode = "invalid-request"
	EUnauthorized ErrorCode = "unauthorized"
	ENotFound     ErrorCode = "not-found"
	EConflict     ErrorCode = "idempotency-conflict"
	// EState: the charge is not in a state the operation applies to (voiding a captured charge,
	// refunding more than is left).
	EState               ErrorCode = "invalid-charge-state"
	EMismatch            ErrorCode = "idempotency-mismatch"
	EDeclined            ErrorCode = "card-declined"
	EGatewayError        ErrorCode = "gateway-error"
	EGatewaysUnavailable ErrorCode = "gateways-unavailable"
	// EStateUnavailable: the store holding money state does not answer; nothing was sent to a
	// gateway, and the same request may be sent again after Retry-After.
	EStateUnavailable ErrorCode = "state-unavailable"
	EInternal         ErrorCode = "internal"
)

// Error is an error with a code and a message safe to show to the API's caller.
type Error struct {
	Code    ErrorCode
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// ErrorCode implements Coded.
func (e *Error) ErrorCode() ErrorCode { return e.Code }

// SafeMessage implements Coded.
func (e *Error) SafeMessage() string { return e.Message }

// Coded is an error that carries its code and a message safe to show to the API's caller: *Error,
// and the errors of other packages that carry more than a message (fallback.Unavailable, with
// its attempts and Retry-After). Code and Message find the first one in an error's chain.
type Coded interface {
	error
	ErrorCode() ErrorCode
	SafeMessage() string
}

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Code returns the code of the first Coded error in err's chain, EInternal for any other non-nil
// error, and "" for nil.
func Code(err error) ErrorCode {
	if err == nil {
		return ""
	}
	var e Coded
	if errors.As(err, &e) {
		return e.ErrorCode()
	}
	return EInternal
}

// Message returns the caller-safe message of the first Coded error in err's chain, or a generic
// one.
func Message(err error) string {
	var e Coded
	if errors.As(err, &e) {
		return e.SafeMessage()
	}
	return "internal error"
}

// Sentinel errors of the stores, checked with errors.Is.
var (
	// ErrNotFound: no record with that id or key.
	ErrNotFound = errors.New("not found")
	// ErrInFlight: the idempotency key's first request has not completed yet.
	ErrInFlight = errors.New("idempotency key in flight")
	// ErrMismatch: the idempotency key was used with another request body.
	ErrMismatch = errors.New("idempotency key used with another request")
	// ErrHoldLost: the request's hold on its idempotency key ran out and a later request took
	// the key; the write was refused, so the stalled holder changes nothing.
	ErrHoldLost = errors.New("idempotency hold lost to a later request")
	// ErrStale: a transition found the charge or refund changed since its caller read it
	// (another request, another instance, the reconciler or the queue worker moved it first),
	// and wrote nothing. The caller reads it again and decides anew from what it finds: the
	// money rules are always checked against the state the write replaces.
	ErrStale = errors.New("changed since it was read")
	// ErrStateUnavailable is wrapped by every error a money store returns because it could not
	// be reached or did not answer in time (as opposed to an answer about the data). Money
	// requests then answer 503 state-unavailable and call no gateway.
	ErrStateUnavailable = errors.New("money state store unavailable")
	// ErrStateFull is wrapped, beside ErrStateUnavailable, by a store that holds all an API
	// key may hold and may drop nothing of it to make room (memstore, where each key has its
	// share of state.max_memory): the answer is the same 503, saying why. Only that key's new
	// charges and new Idempotency-Keys are refused; every other key's go on.
	ErrStateFull = errors.New("money state store full")
)
