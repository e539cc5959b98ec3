package service

import (
	"fmt"
	"maps"
	"reflect"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/resilience"
)

// initMetrics shows the breakers and bulkheads of the named gateways from the start, with their
// cooldowns: a dashboard's rate() and the alert rules need the series before the first change.
func (s *Service) initMetrics(cfg *config.Config, names []string) {
	for _, name := range names {
		g := cfg.Gateways[name]
		s.metrics.InitBulkhead(name, g.MaxConcurrent)
		for _, op := range payrouter.Operations {
			if b := s.domains.Breaker(name, op); b != nil {
				s.metrics.InitBreaker(name, op, b.State())
				s.metrics.BreakerForced(name, op, b.Snapshot().Forced)
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
		gw, err := gateways.NewWith(g.Kind, adapterSettings(g), client)
		if err != nil {
			return nil, fmt.Errorf("gateways.%s: %w", name, err)
		}
		adapters[name], clients[name] = gw, client
		if g.Breaker.OutOfBand() {
			pgw, err := gateways.NewWith(g.Kind, adapterSettings(g), s.domains.ProbeClient(name))
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

// adapterSettings is what a gateway's configuration says of its adapter.
func adapterSettings(g config.Gateway) gateways.Settings {
	return gateways.Settings{BaseURL: g.BaseURL, Credentials: g.Credentials, APIVersion: g.APIVersion}
}

// gatewayWebhookKeys are the webhook keys of every gateway of cfg with a webhook section.
func gatewayWebhookKeys(cfg *config.Config) map[string]payrouter.WebhookKeys {
	keys := map[string]payrouter.WebhookKeys{}
	for _, name := range cfg.GatewayNames {
		if w := cfg.Gateways[name].Webhook; w != nil {
			keys[name] = w.Keys()
		}
	}
	return keys
}

// setGatewayWebhooks gives payments the gateways' webhook keys of cfg and shows their metrics'
// series, forgetting those of gateways that had a webhook in prev (nil: none) and have none now.
func (s *Service) setGatewayWebhooks(cfg, prev *config.Config) {
	keys := gatewayWebhookKeys(cfg)
	s.payments.SetWebhookKeys(keys)
	var names, removed []string
	for _, name := range cfg.GatewayNames {
		if _, ok := keys[name]; ok {
			names = append(names, name)
		}
	}
	if prev != nil {
		for name := range gatewayWebhookKeys(prev) {
			if _, ok := keys[name]; !ok {
				removed = append(removed, name)
			}
		}
	}
	s.metrics.InitGatewayWebhooks(names, removed)
}
