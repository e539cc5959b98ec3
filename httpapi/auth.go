package httpapi

import (
	"log/slog"
	"sync/atomic"

	"github.com/labstack/echo/v5"
	"golang.org/x/time/rate"

	"github.com/payrouter/payrouter"
)

// The listener and reason labels of a failed authentication (payrouter_auth_failures_total and
// the auth.failed log line).
const (
	listenerStorefront = "storefront"
	listenerAdmin      = "admin"

	authMissing = "missing" // no "Authorization: Bearer <token>" header
	authWrong   = "wrong"   // a bearer token that is no configured key or admin token
)

// Each listener logs at most authLogRate auth.failed lines a second, after a burst of
// authLogBurst: a flood of wrong keys (hundreds of thousands a minute) must not flood the log
// and the disk with it. The metric counts every failure, and the first line after a quiet spell
// says how many were not logged (suppressed), so nothing goes unseen.
const (
	authLogRate  = 10
	authLogBurst = 100
)

// authFailureLog samples the auth.failed lines of one listener.
type authFailureLog struct {
	lines      *rate.Limiter
	suppressed atomic.Int64 // failures not logged since the last line
}

func newAuthFailureLog() *authFailureLog {
	return &authFailureLog{lines: rate.NewLimiter(authLogRate, authLogBurst)}
}

// authFailed answers a request whose credentials are missing or wrong with 401, and is the one
// place that sees every failed authentication, of both listeners: it counts it in
// payrouter_auth_failures_total{listener, reason} and logs an auth.failed line with the client
// address (the TCP peer, never a header), the listener, the route, the reason and the request
// id, never the token sent. listener is listenerStorefront or listenerAdmin, reason authMissing
// or authWrong. It also counts the failure against the client's address (limits.go), which
// is answered 429 once it has failed too often.
func (s *server) authFailed(c *echo.Context, listener, reason string) error {
	s.countAuthFailure(c)
	if s.Metrics != nil {
		s.Metrics.AuthFailed(listener, reason)
	}
	if s.authLog.lines.Allow() {
		attrs := []slog.Attr{
			slog.String("client_address", clientAddress(c)),
			slog.String("listener", listener),
			slog.String("route", s.routeOf(c)),
			slog.String("reason", reason),
			slog.Any("request_id", c.Get("request_id")),
		}
		if n := s.authLog.suppressed.Swap(0); n > 0 {
			attrs = append(attrs, slog.Int64("suppressed", n))
		}
		s.Log.LogAttrs(c.Request().Context(), slog.LevelWarn, "auth.failed", attrs...)
	} else {
		s.authLog.suppressed.Add(1)
	}
	detail := "send Authorization: Bearer <API key> with a configured key"
	if listener == listenerAdmin {
		detail = "send Authorization: Bearer <admin token>"
	}
	return writeProblem(c, newProblem(payrouter.EUnauthorized, detail))
}

// scope is the API key scope an authenticated storefront request acts for: what its charges,
// refunds, events and idempotency keys belong to (auth.api_keys scope).
type scope string

// scopeContextKey is where requireAPIKey keeps the request's scope.
const scopeContextKey = "key_scope"

// scopeOf returns the scope of an authenticated request ("" before requireAPIKey ran).
func scopeOf(c *echo.Context) string {
	s, _ := c.Get(scopeContextKey).(scope)
	return string(s)
}
