package httpapi

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/limits"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/telemetry"
)

// codeRateLimited is the problem of a request refused by a limit (docs/limits.md).
const codeRateLimited = "rate-limited"

// Limits are the request limits of both listeners: a token bucket per API key for the
// storefront's authenticated routes, and a throttle of failed authentications per client
// address, shared by the storefront and the admin listener. A reload changes them in place with
// Set, keeping what each key and address has used.
type Limits struct {
	keys *limits.KeyRates
	auth *limits.AuthThrottle
	// hooks throttles the gateway webhook calls that fail verification, per address, at the
	// same rate as auth: a sender of forged calls is refused before its body is read.
	hooks *limits.AuthThrottle
}

// NewLimits returns the limits of cfg for the API keys apiKeys.
func NewLimits(cfg config.Limits, apiKeys []config.APIKey) *Limits {
	l := &Limits{keys: limits.NewKeyRates(keyRate(cfg)), auth: limits.NewAuthThrottle(cfg.AuthFailuresPerMinute, 0),
		hooks: limits.NewAuthThrottle(cfg.AuthFailuresPerMinute, 0)}
	l.Set(cfg, apiKeys)
	return l
}

// Set applies a reloaded configuration: the buckets of keys no longer configured are dropped,
// the others keep their tokens under the new rate.
func (l *Limits) Set(cfg config.Limits, apiKeys []config.APIKey) {
	scopes := make([]string, len(apiKeys))
	for i, k := range apiKeys {
		scopes[i] = keyScope(k)
	}
	l.keys.Set(keyRate(cfg), scopes)
	l.auth.SetPerMinute(cfg.AuthFailuresPerMinute)
	l.hooks.SetPerMinute(cfg.AuthFailuresPerMinute)
}

func keyRate(cfg config.Limits) limits.Rate {
	return limits.Rate{PerSecond: cfg.RequestsPerSecond, Burst: cfg.Burst}
}

// keyLimited runs next for an authenticated API key scope: the request's context carries the
// scope to the bulkheads (the key's share of each gateway, resilience.WithKeyScope), and a key
// over its rate is answered 429 before anything else happens, so no Idempotency-Key is taken:
// the same request may be sent again after Retry-After.
func (s *server) keyLimited(c *echo.Context, scope string, next echo.HandlerFunc) error {
	req := c.Request()
	c.SetRequest(req.WithContext(resilience.WithKeyScope(req.Context(), scope)))
	if s.Limits != nil {
		if wait, ok := s.Limits.keys.Allow(scope, time.Now()); !ok {
			return s.rateLimited(c, telemetry.LimitKeyRate, wait,
				"this API key sent more requests than limits.requests_per_second allows; nothing was done; send the same request again after Retry-After")
		}
	}
	return next(c)
}

// authBlocked answers 429 to a request whose credentials are missing or wrong from a client
// address that failed authentication too often lately; blocked false lets it be answered 401
// (and counted). It is asked only once the credentials were checked and found wanting: the
// address's failures must not lock out the right key sent from the same address (a load
// balancer's, a shop's NAT). A wrong guess costs the same constant-time check either way, and
// is answered 429, not counted again, until the address's bucket refills: the 401s an address
// gets stay at auth_failures_per_minute.
func (s *server) authBlocked(c *echo.Context) (blocked bool, err error) {
	if s.Limits == nil {
		return false, nil
	}
	wait, blocked := s.Limits.auth.Blocked(clientAddress(c), time.Now())
	if !blocked {
		return false, nil
	}
	return true, s.rateLimited(c, telemetry.LimitAuthFailures, wait,
		"too many failed authentications from this address: a missing or wrong credential is refused until Retry-After (a right one is let through)")
}

// countAuthFailure counts a refused authentication against the client's address.
func (s *server) countAuthFailure(c *echo.Context) {
	if s.Limits != nil {
		s.Limits.auth.Failed(clientAddress(c), time.Now())
	}
}

// rateLimited is the 429 of a limit: Retry-After in whole seconds (at least 1) and
// retry_after_ms, counted by reason.
func (s *server) rateLimited(c *echo.Context, reason string, wait time.Duration, detail string) error {
	if s.Metrics != nil {
		s.Metrics.RateLimited(reason)
	}
	p := newProblem(codeRateLimited, detail)
	ms := wait.Milliseconds()
	p.RetryAfter = &ms
	c.Response().Header().Set("Retry-After", strconv.Itoa(limits.RetryAfterSeconds(wait)))
	return writeProblem(c, p)
}
