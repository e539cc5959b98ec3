package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/telemetry"
)

// loadConfig parses the -config flag and loads the file; every problem is one line on stderr and
// the exit code is 2.
func loadConfig(cmd string, args []string, getenv func(string) string, stderr io.Writer) (*config.Config, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	if err := fs.Parse(args); err != nil {
		return nil, &exitError{code: 2}
	}
	if *path == "" {
		return nil, usageError("%s: -config FILE is required", cmd)
	}
	cfg, err := config.Load(*path, getenv, gateways.Kinds())
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("%s: %w", *path, err)}
	}
	return cfg, nil
}

// check is `payrouter check`: validate, then print the capacity arithmetic and warnings.
func check(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig("check", args, getenv, stderr)
	if err != nil {
		return err
	}
	_, err = cfg.Check().WriteTo(stdout)
	return err
}

// probe is `payrouter probe`: the out-of-band prober needs the shared state store.
func probe(_ context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	cfg, err := loadConfig("probe", args, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.State.RedisURL == "" {
		return usageError("probe: a prober beside the instances shares their breakers through state.redis_url; it is empty")
	}
	return usageError("probe: the shared Redis state store is not built yet; run the in-band probe of `payrouter serve` meanwhile")
}

// app is one running payrouter: everything serve wires together.
type app struct {
	cfg     *config.Config
	log     *slog.Logger
	store   payrouter.Store
	metrics *telemetry.Metrics
	domains *resilience.Domains
	router  *routing.Router
}

// newApp wires the configuration into a running set of parts, without listening yet.
func newApp(ctx context.Context, cfg *config.Config, log *slog.Logger) (*app, error) {
	if cfg.State.RedisURL != "" {
		return nil, usageError("state.redis_url: the shared Redis state store is not built yet; leave it empty for the in-memory store (one instance)")
	}
	a := &app{cfg: cfg, log: log, store: memstore.New(), metrics: telemetry.NewMetrics()}

	var settings []resilience.GatewaySettings
	cooldowns := map[string]time.Duration{}
	for _, name := range cfg.GatewayNames {
		g := cfg.Gateways[name]
		timeouts := map[payrouter.Operation]time.Duration{}
		for _, op := range payrouter.Operations {
			timeouts[op] = g.TimeoutFor(string(op))
		}
		settings = append(settings, resilience.GatewaySettings{
			Name: name, Timeout: g.Timeout, Timeouts: timeouts,
			MaxConcurrent: g.MaxConcurrent, MaxWait: g.MaxWait,
			Breaker: resilience.BreakerSettings{
				ConsecutiveFailures: g.Breaker.ConsecutiveFailures,
				FailuresInWindow:    g.Breaker.FailuresInWindow,
				FailureRate:         g.Breaker.FailureRate,
				MinRequests:         g.Breaker.MinRequests,
				Window:              g.Breaker.Window,
				Cooldown:            g.Breaker.Cooldown,
				HalfOpenRequests:    g.Breaker.HalfOpenRequests,
			},
		})
		a.metrics.InitBulkhead(name, g.MaxConcurrent)
		cooldowns[name] = g.Breaker.Cooldown
	}
	a.domains = resilience.NewDomains(settings, telemetry.NewObserver(a.metrics, log, cooldowns))
	for _, s := range a.domains.Snapshots() {
		a.metrics.InitBreaker(s.Gateway, s.Operation, s.State)
	}

	// Forced states outlive the process: apply what the store remembers.
	forced, err := a.store.ForcedStates(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading forced breaker states: %w", err)
	}
	for _, s := range a.domains.Snapshots() {
		if f, ok := forced[s.Name]; ok {
			a.domains.Breaker(s.Gateway, s.Operation).Force(f)
		}
	}

	adapters := map[string]payrouter.Gateway{}
	for _, name := range cfg.GatewayNames {
		g := cfg.Gateways[name]
		gw, err := gateways.New(g.Kind, g.BaseURL, g.Credentials, a.domains.Client(name))
		if err != nil {
			return nil, &exitError{code: 2, err: fmt.Errorf("gateways.%s: %w", name, err)}
		}
		adapters[name] = gw
	}
	a.router, err = routing.New(routing.Config{
		Routes: routesOf(cfg), Gateways: adapters, Domains: a.domains, Charges: a.store,
		Budget: cfg.RequestTimeout, Log: log,
	})
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return a, nil
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
		out = append(out, rt)
	}
	return out
}

// serve is `payrouter serve`: both listeners until ctx ends, then a drain of in-flight requests.
func serve(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	cfg, err := loadConfig("serve", args, getenv, stderr)
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(stderr)
	for _, w := range cfg.Check().Warnings {
		log.Warn("config.warning", "warning", w) // what `payrouter check` would have said
	}
	a, err := newApp(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.store.Close()
	defer a.domains.Close()

	deps := httpapi.Deps{
		APIKeys: cfg.Auth.APIKeys, AdminToken: cfg.Auth.AdminToken, Router: a.router, Store: a.store,
		Domains: a.domains, Metrics: a.metrics, Gateways: cfg.Summary(),
		IdempotencyTTL: cfg.Idempotency.TTL, InFlightTTL: cfg.RequestTimeout + 30*time.Second, Log: log,
	}
	servers := []*http.Server{
		newHTTPServer(cfg.Listen, httpapi.NewServer(deps), cfg.RequestTimeout),
		newHTTPServer(cfg.AdminListen, httpapi.NewAdminServer(deps), cfg.RequestTimeout),
	}
	listeners := make([]net.Listener, len(servers))
	for i, srv := range servers {
		ln, err := net.Listen("tcp", srv.Addr)
		if err != nil {
			for _, l := range listeners[:i] {
				l.Close()
			}
			return fmt.Errorf("listening on %s: %w", srv.Addr, err)
		}
		listeners[i] = ln
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	log.Info("payrouter.serving", "listen", listeners[0].Addr().String(), "admin_listen", listeners[1].Addr().String(),
		"gateways", cfg.GatewayNames, "state", "memory")

	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	// Drain: charges under way finish (each within request_timeout), new connections are refused.
	log.Info("payrouter.draining")
	drainCtx, cancel := context.WithTimeout(context.Background(), cfg.RequestTimeout+5*time.Second)
	defer cancel()
	var firstErr error
	for _, srv := range servers {
		if err := srv.Shutdown(drainCtx); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("draining %s: %w", srv.Addr, err)
		}
	}
	log.Info("payrouter.stopped")
	return firstErr
}

// newHTTPServer sets every timeout: a slow client must not hold a connection open for ever.
func newHTTPServer(addr string, h http.Handler, budget time.Duration) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      budget + 15*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
	}
}
