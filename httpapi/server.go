// Package httpapi serves payrouter over HTTP with echo: the storefront API (charges, health) and
// the admin API (metrics, breakers, gateways). routes.go lists every route; errors become
// application/problem+json in one place (problem.go).
package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/telemetry"
)

// MaxBodyBytes is the largest request body the storefront API reads.
const MaxBodyBytes = 64 << 10

// DefaultHold is Deps.Hold's default: a key held by a dead or stalled instance is free again
// within 5 s (CONTRACT.md asks for 10 s), and three renewals fit in it.
const DefaultHold = 5 * time.Second

// Deps is everything the servers need.
type Deps struct {
	// Credentials are the API keys and the admin token; a reload may change them.
	Credentials *Credentials
	Router      *routing.Router
	// Store is the money state; Forced keeps the breakers' forced states (in Redis for a fleet,
	// else beside the money state in memory).
	Store  payrouter.Store
	Forced payrouter.BreakerStateStore
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
	// IdempotencyTTL is how long a completed answer is kept for its key.
	IdempotencyTTL time.Duration
	// Hold is how long an Idempotency-Key stays held by a request without renewal: the request
	// renews it every third of it while it runs, so a key whose instance died or stalled is free
	// again within Hold; 0: DefaultHold.
	Hold time.Duration
	// Limits are the per-key rate limits and the failed-auth throttle (limits.go); nil: none.
	Limits *Limits
	Log    *slog.Logger
}

type server struct {
	Deps
}

func newEcho(d Deps) (*echo.Echo, *server) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	s := &server{Deps: d}
	if s.Credentials == nil {
		s.Credentials = NewCredentials(nil, "")
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = httpErrorHandler
	// trace before observe: the request's log line and duration carry its span's trace id.
	e.Use(s.requestID, s.trace, s.observe, s.recover)
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
func (s *server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !validRequestID(id) {
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
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		d := time.Since(start)
		status := c.Response().Status
		route := routeOf(c)
		if s.Metrics != nil && !strings.HasPrefix(c.Path(), "/metrics") {
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
	return func(c echo.Context) (err error) {
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
func clientAddress(c echo.Context) string {
	host, _, err := net.SplitHostPort(c.Request().RemoteAddr)
	if err != nil {
		return c.Request().RemoteAddr
	}
	return host
}

// actorOf names who made the request, once authenticated: "key:<scope>" for an API key,
// "admin:<name>" (or "admin") for an admin token; "" before authentication.
func actorOf(c echo.Context) string {
	a, _ := c.Get("actor").(string)
	return a
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(c echo.Context) (string, bool) {
	h := c.Request().Header.Get(echo.HeaderAuthorization)
	const prefix = "Bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	return h[len(prefix):], true
}

// requireAPIKey lets through requests with a configured API key, and remembers which: idempotency
// keys are scoped per API key.
func (s *server) requireAPIKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if blocked, err := s.authBlocked(c); blocked {
			return err
		}
		token, ok := bearer(c)
		if ok {
			sum := sha256.Sum256([]byte(token))
			for _, k := range s.Credentials.load().apiKeys {
				if subtle.ConstantTimeCompare(sum[:], k[:]) == 1 {
					scope := scopeOf(sum)
					c.Set("key_scope", scope)
					c.Set("actor", "key:"+scope)
					return s.keyLimited(c, scope, next)
				}
			}
		}
		s.countAuthFailure(c)
		return writeProblem(c, newProblem(payrouter.EUnauthorized, "send Authorization: Bearer <API key> with a configured key"))
	}
}

// scopeOf names an API key in stored idempotency keys without revealing it.
func scopeOf(sum [32]byte) string {
	const hexdigits = "0123456789abcdef"
	b := make([]byte, 16)
	for i := range 8 {
		b[2*i], b[2*i+1] = hexdigits[sum[i]>>4], hexdigits[sum[i]&15]
	}
	return string(b)
}

// requireAdmin lets through requests with the admin token; with none configured nobody passes.
func (s *server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if blocked, err := s.authBlocked(c); blocked {
			return err
		}
		admin := s.Credentials.load().adminToken
		if admin == "" {
			return writeProblem(c, newProblem(codeForbidden, "the admin API is disabled: set auth.admin_token"))
		}
		token, ok := bearer(c)
		if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(admin)) != 1 {
			s.countAuthFailure(c)
			return writeProblem(c, newProblem(payrouter.EUnauthorized, "send Authorization: Bearer <admin token>"))
		}
		c.Set("actor", "admin")
		return next(c)
	}
}

func (s *server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the configuration is loaded (it is, or nothing would serve) and the
// state store answers within a second.
func (s *server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), time.Second)
	defer cancel()
	if err := s.Store.Ping(ctx); err != nil {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{
			"status": "unavailable", "reason": "money state store: " + err.Error(),
		})
	}
	if s.Coordination != nil {
		if err := s.Coordination.Ping(ctx); err != nil {
			return c.JSON(http.StatusServiceUnavailable, map[string]string{
				"status": "unavailable", "reason": "coordination store (breakers stay local meanwhile): " + err.Error(),
			})
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}
