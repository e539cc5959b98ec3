package service

import (
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
)

// gatewaySettings turns cfg's gateways into resilience's, in file order. It reads each
// gateway's TLS files (config checked them when it loaded; they are read again here, as a reload
// must see a rotated certificate), so it fails when one has become unreadable since.
func gatewaySettings(cfg *config.Config) ([]resilience.GatewaySettings, error) {
	var settings []resilience.GatewaySettings
	for _, name := range cfg.GatewayNames {
		g := cfg.Gateways[name]
		tlsConfig, tlsFingerprint, err := g.TLS.ClientTLS().Load()
		if err != nil {
			return nil, fmt.Errorf("gateways.%s.tls: %w", name, err)
		}
		timeouts := map[payrouter.Operation]time.Duration{}
		for _, op := range payrouter.Operations {
			timeouts[op] = g.TimeoutFor(string(op))
		}
		settings = append(settings, resilience.GatewaySettings{
			Name: name, Endpoint: g.Kind + " " + g.BaseURL, Timeout: g.Timeout, Timeouts: timeouts,
			MaxConcurrent: g.MaxConcurrent, MaxWait: g.MaxWait,
			ProbeInterval: g.Breaker.ProbeInterval, ProbeTimeout: g.Breaker.ProbeTimeout,
			TLS: tlsConfig, TLSFingerprint: tlsFingerprint,
			Breaker: resilience.BreakerSettings{
				ConsecutiveFailures: g.Breaker.ConsecutiveFailures,
				FailuresInWindow:    g.Breaker.FailuresInWindow,
				FailureRate:         g.Breaker.FailureRate,
				MinRequests:         g.Breaker.MinRequests,
				Window:              g.Breaker.Window,
				Cooldown:            g.Breaker.Cooldown,
				HalfOpenRequests:    g.Breaker.HalfOpenRequests,
				OutOfBand:           g.Breaker.Probe == config.ProbeOutOfBand,
			},
		})
	}
	return settings, nil
}

// cooldowns gives each gateway's breaker cooldown, for the transition log line.
func cooldowns(cfg *config.Config) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, g := range cfg.Gateways {
		out[name] = g.Breaker.Cooldown
	}
	return out
}

// routesOf turns the configured routes into routing's.
func routesOf(cfg *config.Config) []routing.Route {
	var out []routing.Route
	for _, r := range cfg.Routes {
		rt := routing.Route{
			Name: r.Name, Gateways: r.Gateways,
			Match: routing.Match{Currency: r.Match.Currency, Country: r.Match.Country, MinAmount: r.Match.MinAmount, MaxAmount: r.Match.MaxAmount},
		}
		for _, g := range r.SplitOrder {
			rt.Split = append(rt.Split, routing.Weight{Gateway: g, Weight: r.Split[g]})
		}
		rt.Strategy = routing.Strategy(r.Strategy)
		if r.Hedge != nil {
			after, p95 := r.Hedge.Delay()
			rt.Hedge = &routing.Hedge{After: after, P95: p95, Budget: r.Hedge.Budget}
		}
		out = append(out, rt)
	}
	return out
}

// initMetrics shows the breakers and bulkheads of the named gateways from the start, with their
// cooldowns: a dashboard's rate() and the alert rules need the series before the first change.
func (s *Service) initMetrics(cfg *config.Config, names []string) {
	for _, name := range names {
		g := cfg.Gateways[name]
		s.metrics.InitBulkhead(name, g.MaxConcurrent)
		for _, op := range payrouter.Operations {
			if b := s.domains.Breaker(name, op); b != nil {
				s.metrics.InitBreaker(name, op, b.State())
				s.metrics.BreakerCooldown(name, op, g.Breaker.Cooldown)
			}
		}
	}
}

// wireGateways builds the adapter of every gateway of cfg on its domain's client, and a probe
// check on the domain's probe client (a connection pool of its own, with the same TLS settings)
// for each out-of-band one, into s.adapters and s.checks. Both clients come from resilience,
// which builds them with gatewayhttp.NewClient: no redirect is ever followed. A gateway whose
// configuration and clients are the same as in prev (nil: none) keeps the ones it has; those of
// removed gateways stay in s.adapters for the charges they hold. It returns the gateways whose
// probe check is new.
func (s *Service) wireGateways(cfg, prev *config.Config) (renewedChecks []string, err error) {
	adapters := maps.Clone(s.adapters)
	clients := maps.Clone(s.clients)
	checks := map[string]resilience.HealthCheck{}
	for _, name := range cfg.GatewayNames {
		g := cfg.Gateways[name]
		client := s.domains.Client(name)
		if prev != nil && reflect.DeepEqual(prev.Gateways[name], g) && s.clients[name] == client {
			if c := s.checks[name]; c != nil {
				checks[name] = c
			}
			continue
		}
		gw, err := gateways.New(g.Kind, g.BaseURL, g.Credentials, client)
		if err != nil {
			return nil, fmt.Errorf("gateways.%s: %w", name, err)
		}
		adapters[name], clients[name] = gw, client
		if g.Breaker.Probe == config.ProbeOutOfBand {
			pgw, err := gateways.New(g.Kind, g.BaseURL, g.Credentials, s.domains.ProbeClient(name))
			if err != nil {
				return nil, fmt.Errorf("gateways.%s: %w", name, err)
			}
			checks[name] = pgw.Health
			renewedChecks = append(renewedChecks, name)
		}
	}
	s.adapters, s.checks, s.clients = adapters, checks, clients
	return renewedChecks, nil
}
