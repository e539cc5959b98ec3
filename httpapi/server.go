// Package httpapi serves payrouter over HTTP with echo: the storefront API (charges, health) and
// the admin API (metrics, breakers, gateways). routes.go lists every route; errors become
// application/problem+json in one place (problem.go).
package httpapi

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/cardnum"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/payments"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/telemetry"
)

// MaxBodyBytes is the largest request body the storefront API reads.
const MaxBodyBytes = 64 << 10

// Deps is everything the servers need.
type Deps struct {
	// Credentials are the API keys and the admin token; a reload may change them.
	Credentials *Credentials
	// Payments runs every storefront operation on money: its idempotency, its charge's life.
	Payments *payments.Service
	// Store is the money state.
	Store payrouter.Store
	// Coordination, when set, is pinged by /readyz beside Store: the fleet's Redis.
	Coordination interface{ Ping(context.Context) error }
	Domains      *resilience.Domains
	// Fleet shares breaker changes with the other instances; nil with an unshared store.
	Fleet    *resilience.Fleet
	Metrics  *telemetry.Metrics
	Gateways []config.GatewaySummary // for /admin/gateways: no credentials
	// Reloader re-reads the configuration (POST /admin/reload) and then lists the gateways in
	// place of Gateways; nil: the configuration is fixed, and the reload answers 404.
	Reloader Reloader
	// Limits are the per-key rate limits and the failed-auth throttle (limits.go); nil: none.
	Limits *Limits
	// Webhooks are the storefront webhooks (webhooks.go); nil: none, GET /admin/webhooks lists
	// nothing.
	Webhooks Webhooks
	Log      *slog.Logger
}

type server struct {
	Deps
	authLog *authFailureLog            // samples this listener's auth.failed lines
	routes  func() map[routeKey]string // the routes the listener serves, with their names (routeOf)
}

func newEcho(d Deps) (*echo.Echo, *server) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	s := &server{Deps: d, authLog: newAuthFailureLog()}
	if s.Credentials == nil {
		s.Credentials = NewCredentials(nil, "")
	}
	e := echo.New()
	// echo's own complaints (a handler writing a second status) join payrouter's log, not stdout.
	e.Logger = s.Log
	s.routes = routeSet(e)
	e.HTTPErrorHandler = s.httpErrorHandler
	// trace before observe: the request's log line and duration carry its span's trace id.
	e.Use(s.requestID, s.trace, s.observe, s.recover, s.screenPathID)
	return e, s
}

// NewServer returns the storefront API handler.
func NewServer(d Deps) http.Handler {
	e, s := newEcho(d)
	s.storefrontRoutes(e)
	return e
}

// NewAdminServer returns the admin API handler.
func NewAdminServer(d Deps) http.Handler {
	e, s := newEcho(d)
	s.adminRoutes(e)
	return e
}

// requestID gives every response an X-Request-Id: the caller's when it sent a sensible one.
//
// One that looks like a card number is replaced too, never echoed nor logged, and a warning
// (without it) says so. It is replaced rather than refused: X-Request-Id is a correlation id,
// often written by a proxy in front of the storefront rather than by the storefront itself,
// and it carries nothing a payment needs; refusing would turn a logging bug upstream into
// failed payments, while replacing it already keeps the number out of everything payrouter
// writes.
func (s *server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		switch {
		case cardnum.Contains(id):
			id = "req_" + rand.Text()
			s.Log.WarnContext(c.Request().Context(), "http.request_id_replaced", "request_id", id,
				"why", "the X-Request-Id sent looks like a card number: it is neither echoed nor logged")
		case !validRequestID(id):
			id = "req_" + rand.Text()
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		c.Set("request_id", id)
		return next(c)
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 200 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// observe logs one line per request and feeds the request-duration histogram, both with the
// request's context: the line carries the trace id of the span trace put there, and the
// histogram takes it as an exemplar. It never logs a body or a header value but the request id.
func (s *server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Echo().HTTPErrorHandler(c, err)
		}
		d := time.Since(start)
		_, status := echo.ResolveResponseStatus(c.Response(), nil)
		route := s.routeOf(c)
		if s.Metrics != nil && !s.isScrape(c) {
			s.Metrics.HTTPRequest(c.Request().Context(), route, status, d)
		}
		s.Log.LogAttrs(c.Request().Context(), slog.LevelInfo, "http.request",
			slog.String("request_id", c.Response().Header().Get(echo.HeaderXRequestID)),
			slog.String("route", route),
			slog.Int("status", status),
			slog.Int64("duration_ms", d.Milliseconds()),
		)
		return nil
	}
}

// recover turns a panic into a 500 problem and a log line, and keeps the process serving.
func (s *server) recover(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				// The panic's type and where it happened, never its value: a value may hold the
				// request, and with it a token.
				s.Log.ErrorContext(c.Request().Context(), "http.panic", "request_id", c.Get("request_id"),
					"panic_type", fmt.Sprintf("%T", r), "stack", string(debug.Stack()))
				err = writeProblem(c, newProblem(payrouter.EInternal, "payrouter could not complete the request; it has been logged"))
			}
		}()
		return next(c)
	}
}

// clientAddress is the address of the peer that sent the request: the TCP peer, never a
// header such as X-Forwarded-For, which the caller could write. It names the client in the
// audit and failed-authentication lines.
func clientAddress(c *echo.Context) string {
	host, _, err := net.SplitHostPort(c.Request().RemoteAddr)
	if err != nil {
		return c.Request().RemoteAddr
	}
	return host
}

// actorOf names who made the request, once authenticated: "key:<scope>" for an API key,
// "admin:<name>" for an admin token (auth.admin_token is "admin:admin"); "" before
// authentication.
func actorOf(c *echo.Context) string {
	a, _ := c.Get("actor").(string)
	return a
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(c *echo.Context) (string, bool) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return h[len(prefix):], true
}

// requireAPIKey lets through requests with a configured API key that has right (a config.Right*),
// and remembers which key: charges, refunds and idempotency keys are scoped per API key. A
// missing or unknown key is authFailed (401), or 429 from an address that failed too often
// (authBlocked); a right key is never refused for its address's failures. A known key without
// the right answers 403.
func (s *server) requireAPIKey(right string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			token, ok := bearer(c)
			var key *apiKey
			if ok {
				key = s.Credentials.load().apiKey(token)
			}
			if key == nil {
				if blocked, err := s.authBlocked(c); blocked {
					return err
				}
				if !ok {
					return s.authFailed(c, listenerStorefront, authMissing)
				}
				return s.authFailed(c, listenerStorefront, authWrong)
			}
			c.Set(scopeContextKey, scope(key.scope))
			c.Set("actor", "key:"+key.scope)
			if !key.allows(right) {
				return writeProblem(c, newProblem(codeForbidden, fmt.Sprintf(
					"this API key has no right to %s (its rights: %s; see auth.api_keys rights)", right, strings.Join(key.list, ", "))))
			}
			return s.keyLimited(c, key.scope, next)
		}
	}
}

// digestScope names an API key in stored idempotency keys without revealing it.
func digestScope(sum [32]byte) string {
	const hexdigits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := range 8 {
		b[2*i], b[2*i+1] = hexdigits[sum[i]>>4], hexdigits[sum[i]&15]
	}
	return string(b)
}

// requireAdmin lets through requests with one of the admin tokens, and names the actor by the
// token's name; with none configured nobody passes (403). The token is compared with every
// admin token in constant time (credentials.admin). A missing or wrong token is authFailed
// (401), or 429 from an address that failed too often (authBlocked); a right token is never
// refused for its address's failures.
func (s *server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		creds := s.Credentials.load()
		if len(creds.admins) == 0 {
			return writeProblem(c, newProblem(codeForbidden, "the admin API is disabled: set auth.admin_token or auth.admin_tokens"))
		}
		token, ok := bearer(c)
		name := ""
		if ok {
			name = creds.admin(token)
		}
		if name == "" {
			if blocked, err := s.authBlocked(c); blocked {
				return err
			}
			if !ok {
				return s.authFailed(c, listenerAdmin, authMissing)
			}
			return s.authFailed(c, listenerAdmin, authWrong)
		}
		c.Set("actor", "admin:"+name)
		return next(c)
	}
}

func (s *server) healthz(c *echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz is the storefront's GET /readyz: 200 when the configuration is loaded (it is, or
// nothing would serve) and the state stores answer within a second, else 503 with no more said:
// what does not answer, and its error, are the admin listener's to tell (adminReadyz).
func (s *server) readyz(c *echo.Context) error { return s.ready(c, false) }

// adminReadyz is the admin listener's GET /readyz: readyz with the reason, which names the store
// and its error (a database's user and name may be in it): the admin listener is private.
func (s *server) adminReadyz(c *echo.Context) error { return s.ready(c, true) }

// ready answers whether the state stores answer within a second, with what does not when
// details is set.
func (s *server) ready(c *echo.Context, details bool) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), time.Second)
	defer cancel()
	notReady := func(reason string) error {
		body := map[string]string{"status": "unavailable"}
		if details {
			body["reason"] = reason
		}
		return c.JSON(http.StatusServiceUnavailable, body)
	}
	if err := s.Store.Ping(ctx); err != nil {
		return notReady("money state store: " + err.Error())
	}
	if s.Coordination != nil {
		if err := s.Coordination.Ping(ctx); err != nil {
			return notReady("coordination store (breakers stay local meanwhile): " + err.Error())
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
