package service

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/webhooks"
)

// reload re-reads the configuration file and applies what can change while serving, in place:
// gateways (added, changed, removed), routes, fallbacks, the API keys and admin token, and the limits. Gateways whose configuration is the
// same keep their breakers, bulkheads and connections; a changed one keeps each part whose own
// settings did not change (resilience.Domains.Update). Charges under way finish on the settings
// they started with. A file that does not load is refused with its problems and nothing changes.
// Settings that need a restart (listeners, request_timeout, state, idempotency) are reported
// and keep their running values; the listeners' TLS files are read again, and their
// certificates renewed for new connections. Each reload is counted in payrouter_config_reloads_total and
// logged (config.reloaded or config.reload_refused).
func (s *Service) reload(how string) (config.Changes, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	running := s.live.Load()
	next, err := config.Load(s.path, s.getenv, gateways.Kinds())
	var settings []resilience.GatewaySettings
	if err == nil {
		next = config.Reloadable(running, next)
		err = dryRunAdapters(next)
	}
	if err == nil {
		settings, err = next.GatewaySettings() // the TLS files, read again
	}
	if err != nil {
		s.metrics.ConfigReloaded(false)
		var problems []string
		var verr *config.ValidationError
		if errors.As(err, &verr) {
			problems = verr.Problems
		} else {
			problems = []string{err.Error()}
		}
		s.log.Error("config.reload_refused", "how", how, "path", s.path, "problems", problems,
			"then", "the running configuration stays")
		return config.Changes{}, fmt.Errorf("%w: %w", httpapi.ErrConfigRefused, err)
	}

	changes := config.Diff(running, next)
	report, err := s.domains.Update(settings)
	if err != nil { // config refuses what Update would; this is a bug
		s.metrics.ConfigReloaded(false)
		s.log.Error("config.reload_refused", "how", how, "err", err.Error())
		return config.Changes{}, fmt.Errorf("%w: %w", httpapi.ErrConfigRefused, err)
	}
	changes.Renewed = report.Renewed
	// A TLS file rotated under the same path changes no line of the file, but the gateway's
	// connections are new: it is changed.
	for _, name := range report.Changed {
		if i := slices.Index(changes.Gateways.Unchanged, name); i >= 0 {
			changes.Gateways.Unchanged = slices.Delete(changes.Gateways.Unchanged, i, i+1)
			changes.Gateways.Changed = append(changes.Gateways.Changed, name)
		}
	}
	renewedChecks, err := s.wireGateways(next, running)
	if err == nil {
		err = s.router.Update(next.Routes, s.adapters, next.Fallbacks)
	}
	if err == nil {
		s.payments.Update(s.router.Gateways(), next.Fallbacks)
		s.setGatewayWebhooks(next, running)
	}
	if err != nil {
		// dryRunAdapters and config validation make this unreachable; should it happen, the
		// domains are new and the router is not: say so loudly.
		s.metrics.ConfigReloaded(false)
		s.log.Error("config.reload_failed", "how", how, "err", err.Error())
		return config.Changes{}, err
	}
	if err == nil && s.hooks != nil {
		err = s.hooks.Update(next.Webhooks, config.WebhookOwner)
	}
	if err != nil {
		// Validation makes this unreachable (a secret it accepted that the signer refuses).
		s.metrics.ConfigReloaded(false)
		s.log.Error("config.reload_failed", "how", how, "err", err.Error())
		return config.Changes{}, err
	}
	if changes.Webhooks {
		var removed []string
		for _, e := range running.Webhooks.Endpoints {
			if !slices.ContainsFunc(next.Webhooks.Endpoints, func(n webhooks.Endpoint) bool { return n.Name == e.Name }) {
				removed = append(removed, e.Name)
			}
		}
		s.metrics.InitWebhookEndpoints(webhookNames(next), removed)
	}
	s.prober.Update(s.checks, renewedChecks)
	if s.worker != nil {
		s.worker.SetIdle(workerIdle(next))
	}
	s.creds.SetAuth(next.Auth)
	s.limits.Set(next.Limits, next.Auth.APIKeys)
	s.domains.SetKeyShare(next.KeyShareFor())
	if s.mem != nil {
		// state.max_memory needs a restart, but its share per key follows the keys: a key
		// added shares the same bound, so the whole stays within it.
		s.mem.SetMaxBytesPerOwner(next.MemoryPerKey())
	}
	s.metrics.ForgetGateways(changes.Gateways.Removed)
	s.initMetrics(next, slices.Concat(changes.Gateways.Added, changes.Gateways.Changed))
	certificates := s.reloadCertificates(next)
	s.live.Store(next)
	s.metrics.ConfigReloaded(true)
	s.log.Info("config.reloaded", "how", how, "path", s.path, "certificates_reloaded", certificates,
		"added", changes.Gateways.Added, "changed", changes.Gateways.Changed, "removed", changes.Gateways.Removed,
		"renewed", changes.Renewed, "routes_changed", changes.Routes, "fallbacks_changed", changes.Fallbacks, "auth_changed", changes.Auth, "limits_changed", changes.Limits,
		"webhooks_changed", changes.Webhooks, "restart_needed", changes.RestartNeeded)
	for _, w := range next.Check().Warnings {
		s.log.Warn("config.warning", "warning", w)
	}
	return changes, nil
}

// Reload is POST /admin/reload (httpapi.Reloader).
func (s *Service) Reload(context.Context) (config.Changes, error) { return s.reload("admin") }

// Summary lists the gateways now configured, for /admin/gateways (httpapi.Reloader).
func (s *Service) Summary() []config.GatewaySummary { return s.live.Load().Summary() }

// Config is the configuration in use: the one New was given, or the last reload applied.
func (s *Service) Config() *config.Config { return s.live.Load() }
