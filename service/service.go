// Package service is one running payrouter. New builds every part from a configuration: the
// state stores, the gateways' failure domains and adapters, the router and the payments it runs charges for, the
// prober, the queue worker and the reconciler, and the HTTP handlers of both listeners. Reload
// applies what can change while serving. Close stops it in the order the money needs: the work
// charges left running (a late hedge's void), then the background workers, then the gateways'
// connections and the stores.
//
// cmd/payrouter parses its flags and calls this package; the OpenAPI check builds the service
// through it too, so what the tests drive is what production runs.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/listener"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/payments"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/statestore"
	"github.com/payrouter/payrouter/telemetry"
	"github.com/payrouter/payrouter/webhooks"
)

// Role is what a process runs.
type Role string

const (
	// Serve moves money: both listeners, the money store, the queue worker and the reconciler.
	Serve Role = "serve"
	// Probe is the out-of-band prober alone: it shares the fleet's breakers through Redis, opens
	// no database and moves no money.
	Probe Role = "probe"
)

// Options are what New needs besides the configuration.
type Options struct {
	Role Role // "": Serve
	// Path and Getenv are where Reload reads the configuration again. Path "": Reload refuses.
	Path   string
	Getenv func(string) string
	Log    *slog.Logger // nil: discarded
	// LogSink, when set, is the queue Log writes through (telemetry.NewSinkLogger): its dropped
	// lines are exported as payrouter_log_lines_dropped_total. The caller closes it, after Close,
	// so that the lines of the shutdown itself are written too.
	LogSink *telemetry.LogSink
	// Store, when set, is the money state in place of the one the configuration names: a store
	// the caller built (and closes). Tests use it to wrap memstore.
	Store payrouter.Store
}

// ConfigError is a configuration, or what it names, that the service refuses before it starts
// (a TLS file that cannot be read, a state URL its client cannot parse, an adapter missing a
// credential). `payrouter` exits 2 on it; any other error of New is the world refusing (a
// database that does not answer), exit 1.
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// refused wraps err, when there is one, as a ConfigError.
func refused(err error) error {
	if err == nil {
		return nil
	}
	return &ConfigError{Err: err}
}

// Service is one running payrouter: everything serve (or probe) wires together.
type Service struct {
	cfg    *config.Config // as started: the settings a reload cannot change come from here
	role   Role
	log    *slog.Logger
	origin string // this process, as the fleet and the probe leases know it
	// path and getenv are where a reload reads the configuration from.
	path   string
	getenv func(string) string
	// store is the money state (memstore, or pgstore for a fleet); mem is it when it is the
	// bounded memstore, whose per-key share of state.max_memory a reload updates.
	store   payrouter.Store
	mem     *memstore.Store
	shared  *statestore.Store // the fleet's Redis; nil without state.redis_url
	fleet   *resilience.Fleet // nil without state.redis_url
	prober  *resilience.Prober
	metrics *telemetry.Metrics
	obs     *telemetry.Observer
	domains *resilience.Domains
	router  *routing.Router
	// payments owns a charge's life: its idempotency, every save, capture, void, refund,
	// look-up and queued task; the router runs its attempts.
	payments *payments.Service
	// worker drains the task queue and reconciler resolves processing charges; nil in Probe.
	worker     *fallback.Worker
	reconciler *payments.Reconciler
	// hooks dispatches the events to the storefront's webhook endpoints and delivers them
	// (the worker runs its tasks); nil in Probe.
	hooks *webhooks.Service
	// closers release what New opened, run last first by Close.
	closers []func()
	// stopBackground ends what Start started, and background waits for it.
	stopBackground context.CancelFunc
	background     sync.WaitGroup
	closeOnce      sync.Once

	// reloadMu orders reloads. live is the configuration in use; adapters and checks are the
	// gateways' adapters (of removed gateways too, for the charges they hold) and probe checks.
	reloadMu sync.Mutex
	live     atomic.Pointer[config.Config]
	creds    *httpapi.Credentials // the API keys and admin token both listeners check
	limits   *httpapi.Limits      // per-key rates and the failed-auth throttle of both listeners
	adapters map[string]payrouter.Gateway
	checks   map[string]resilience.HealthCheck
	// listeners are Serve's storefront and admin listeners, whose certificates a reload renews.
	listeners []*listener.Listener
	// clients are the domain clients the adapters were built on: a reload that renews a
	// gateway's connections (a rotated TLS file) rebuilds its adapters on the new ones.
	clients map[string]*http.Client
}

// New wires cfg into a service, without listening or starting anything yet: Serve (or Start)
// does. cfg must have passed Validate. On an error, what was opened is closed again.
func New(ctx context.Context, cfg *config.Config, o Options) (*Service, error) {
	s := &Service{
		cfg: cfg, role: cmpRole(o.Role), log: o.Log, metrics: telemetry.NewMetrics(),
		path: o.Path, getenv: o.Getenv, adapters: map[string]payrouter.Gateway{},
		checks: map[string]resilience.HealthCheck{}, clients: map[string]*http.Client{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if o.LogSink != nil {
		s.metrics.WatchLogSink(o.LogSink)
	}
	s.origin = InstanceName(s.role)
	s.live.Store(cfg)
	if err := s.build(ctx, cfg, o.Store); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// InstanceName is how a process names itself to the others and to ops: "<host>/<role>/<pid>".
// It is the holder of its leases, the consumer of its queue tasks, the origin of the breaker
// changes it shares, and the "instance" of every line it logs (cmd/payrouter adds it to the
// logger), so that a line can be told from the same line of another instance.
func InstanceName(r Role) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s/%d", host, cmpRole(r), os.Getpid())
}

func cmpRole(r Role) Role {
	if r == "" {
		return Serve
	}
	return r
}

// build is New's work, in the order each part needs the ones before it.
func (s *Service) build(ctx context.Context, cfg *config.Config, store payrouter.Store) error {
	s.creds = httpapi.NewAuthCredentials(cfg.Auth)
	s.obs = telemetry.NewObserver(s.metrics, s.log)
	settings, err := cfg.GatewaySettings()
	if err != nil {
		return refused(err)
	}
	s.domains = resilience.NewDomains(settings, s.obs)
	s.closers = append(s.closers, s.domains.Close)
	s.limits = httpapi.NewLimits(cfg.Limits, cfg.Auth.APIKeys)
	s.domains.SetKeyShare(cfg.KeyShareFor())
	s.initMetrics(cfg, cfg.GatewayNames)
	if err := s.openStores(ctx, store); err != nil {
		return err
	}
	if _, err := s.wireGateways(cfg, nil); err != nil {
		return refused(err)
	}
	var leases payrouter.Leases
	if s.shared != nil {
		leases = s.shared
	}
	s.prober = resilience.NewProber(s.domains, s.checks, s.obs, resilience.ProberOptions{
		Leases: leases, Holder: s.origin, Log: s.log, Failed: s.metrics.CoordinationFailed,
	})
	s.router, err = routing.New(routing.Config{
		Routes: cfg.Routes, Gateways: s.adapters, Domains: s.domains,
		Budget: cfg.RequestTimeout, Log: s.log, Observer: s.metrics.RouterObserver(),
		Fallbacks: cfg.Fallbacks,
	})
	if err != nil {
		return refused(err)
	}
	s.payments = payments.New(payments.Config{
		Router: s.router, Keys: s.store, KeysTTL: cfg.Idempotency.TTL, Events: s.store,
		Charges: s.store, Refunds: s.store, Queue: s.store, Budget: cfg.RequestTimeout,
		Log: s.log, Fallbacks: cfg.Fallbacks, Observer: s.metrics.RouterObserver(),
	})
	s.setGatewayWebhooks(cfg, nil)
	if s.role == Serve {
		// The money work done later: queued refunds, voids, rechecks of late approvals, and
		// charges whose outcome is not known yet. Every instance drains the shared queue (a task
		// is handed to one at a time); one at a time reconciles, by lease.
		s.hooks = webhooks.New(webhooks.Config{
			Store: s.store, Render: httpapi.EventJSON, Observer: s.metrics, Log: s.log,
			Wake: func() { s.worker.Wake() },
		})
		if err := s.hooks.Update(cfg.Webhooks, config.WebhookOwner); err != nil {
			return refused(err)
		}
		s.metrics.InitWebhookEndpoints(webhookNames(cfg), nil)
		handlers := s.payments.Handlers()
		handlers[payrouter.TaskWebhook] = s.hooks.Handle
		s.worker = &fallback.Worker{
			Queue: s.store, Consumer: s.origin, Handlers: handlers, Log: s.log, Depth: s.metrics.QueueDepth,
			Idle: workerIdle(cfg),
		}
		s.reconciler = &payments.Reconciler{Payments: s.payments, Leases: leases, Holder: s.origin, Log: s.log}
	}
	return nil
}

// workerIdle is how long a queued task handed to an instance waits before another may take it:
// more than twice the longest task, two gateway calls (the worker bounds each task by half of
// it), or a webhook attempt and the write of how it ended, so a task is never worked twice at
// once, and no less than 10s.
func workerIdle(cfg *config.Config) time.Duration {
	idle := 10 * time.Second
	for _, g := range cfg.Gateways {
		for _, op := range payrouter.Operations {
			idle = max(idle, 4*g.TimeoutFor(op)+time.Second)
		}
	}
	for _, e := range cfg.Webhooks.Endpoints {
		idle = max(idle, 2*e.Timeout+10*time.Second)
	}
	return idle
}

// webhookNames lists the configured webhook endpoints' names.
func webhookNames(cfg *config.Config) []string {
	names := make([]string, len(cfg.Webhooks.Endpoints))
	for i, e := range cfg.Webhooks.Endpoints {
		names[i] = e.Name
	}
	return names
}

// Deps are the dependencies of the service's HTTP handlers (httpapi.NewServer and
// NewAdminServer), the service itself answering POST /admin/reload.
func (s *Service) Deps() httpapi.Deps {
	deps := httpapi.Deps{
		Credentials: s.creds, Payments: s.payments, Store: s.store,
		Domains: s.domains, Fleet: s.fleet, Metrics: s.metrics, Gateways: s.cfg.Summary(), Reloader: s,
		Limits: s.limits, Log: s.log,
	}
	if s.hooks != nil {
		deps.Webhooks = s.hooks
	}
	if s.shared != nil {
		deps.Coordination = s.shared
	}
	return deps
}

// Start starts the work done in the background until Close: the state store's health check and
// the fleet's sync, the prober, and in Serve the database watch, the queue worker, the
// reconciler and the webhooks' dispatcher. It does nothing when called again.
func (s *Service) Start() {
	if s.stopBackground != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopBackground = cancel
	if s.shared != nil {
		s.background.Go(func() { s.shared.Run(ctx) })
		s.background.Go(func() { s.fleet.Run(ctx) })
	}
	s.background.Go(func() { s.prober.Run(ctx) })
	if s.worker != nil {
		s.background.Go(func() { s.watchDatabase(ctx) })
		s.background.Go(func() { s.worker.Run(ctx) })
		s.background.Go(func() { s.reconciler.Run(ctx) })
		s.background.Go(func() { s.hooks.Run(ctx) })
	}
}

// Close stops the service, in this order: it waits for the attempts charges left running when
// they answered (a hedge's late approval is voided, or its void queued, through stores that are
// still open) and for the captures hedged charges send after their answers, stops the background work and waits for it, then closes the gateways'
// connections and the stores, the last opened first. Call it once the listeners are drained
// (Serve returns then); it is safe to call more than once.
func (s *Service) Close() {
	s.closeOnce.Do(func() {
		if s.router != nil {
			s.router.Wait()
		}
		if s.payments != nil {
			// The captures of hedged charges sent after their answers (else the worker sends them).
			s.payments.Wait()
		}
		if s.stopBackground != nil {
			s.stopBackground()
			s.background.Wait()
		}
		if s.hooks != nil {
			// Webhook attempts under way are abandoned (handed out again once idle) before the
			// store they record in closes.
			s.hooks.Close()
		}
		for i := len(s.closers) - 1; i >= 0; i-- {
			s.closers[i]()
		}
	})
}

// closing is a closer that logs what close returns: it is the last word on what a store did
// with its connections, and nobody else hears it.
func (s *Service) closing(what string, close func() error) func() {
	return func() {
		if err := close(); err != nil {
			s.log.Warn("close_failed", "what", what, "err", err.Error())
		}
	}
}

// stateName says where the state lives, for the start-up log line (never the URL: it may hold a
// password).
func (s *Service) stateName() string {
	switch {
	case s.shared != nil:
		return "postgresql+redis"
	case s.cfg.State.DatabaseURL != "":
		return "postgresql"
	}
	return "memory"
}
