package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/fallback"
	"github.com/payrouter/payrouter/gateways"
	"github.com/payrouter/payrouter/httpapi"
	"github.com/payrouter/payrouter/listener"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/pgstore"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/routing"
	"github.com/payrouter/payrouter/settle"
	"github.com/payrouter/payrouter/statestore"
	"github.com/payrouter/payrouter/telemetry"
)

// loadConfig parses the -config flag and loads the file; every problem is one line on stderr and
// the exit code is 2. It returns the file's path too.
func loadConfig(cmd string, args []string, getenv func(string) string, stderr io.Writer) (*config.Config, string, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	if err := fs.Parse(args); err != nil {
		return nil, "", &exitError{code: 2}
	}
	cfg, err := loadConfigFile(cmd, *path, getenv)
	return cfg, *path, err
}

// loadConfigFile loads the file -config named.
func loadConfigFile(cmd, path string, getenv func(string) string) (*config.Config, error) {
	if path == "" {
		return nil, usageError("%s: -config FILE is required", cmd)
	}
	cfg, err := config.Load(path, getenv, gateways.Kinds())
	if err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("%s: %w", path, err)}
	}
	return cfg, nil
}

// check is `payrouter check`: validate, then print the capacity arithmetic and warnings.
func check(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, path, err := loadConfig("check", args, getenv, stderr)
	if err != nil {
		return err
	}
	if err := validateStart(context.Background(), path, cfg, getenv); err != nil {
		return err
	}
	_, err = cfg.Check().WriteTo(stdout)
	return err
}

// migrate is `payrouter migrate`: the database's schema brought to this build's version, for a
// deploy that runs it before the new instances start (serve applies the same migrations at start,
// so it is never required). Safe while instances run and when several run it at once.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, _, err := loadConfig("migrate", args, getenv, stderr)
	if err != nil {
		return err
	}
	if cfg.State.DatabaseURL == "" {
		return usageError("migrate: state.database_url is empty: the in-memory store has no schema")
	}
	if err := pgstore.Migrate(ctx, cfg.State.DatabaseURL); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintln(stdout, "payrouter: the database is at this build's schema")
	return nil
}

// probe is `payrouter probe`: the out-of-band prober alone, as its own process beside the
// instances. It shares their breakers through the state store, and leads a gateway's probing
// only while it holds that gateway's lease, so any number of probers may run.
func probe(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	listen := fs.String("listen", "", "address for GET /metrics and /healthz (empty: none)")
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	cfg, err := loadConfigFile("probe", *path, getenv)
	if err != nil {
		return err
	}
	if err := validateStart(ctx, *path, cfg, getenv); err != nil {
		return err
	}
	if cfg.State.RedisURL == "" {
		return usageError("probe: a prober beside the instances shares their breakers through state.redis_url; it is empty")
	}
	log := telemetry.NewLogger(stderr)
	a, err := newApp(ctx, cfg, log, "probe", *path, getenv)
	if err != nil {
		return err
	}
	defer a.close()
	if len(a.prober.Gateways()) == 0 {
		log.Warn("probe.nothing_to_probe", "why", "no gateway has breaker.probe: out_of_band")
	}
	var srv *http.Server
	if *listen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.metrics.Handler())
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"ok"}`) })
		srv = newHTTPServer(*listen, mux, 5*time.Second, log)
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", *listen, err)
		}
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				log.Error("probe.listen_failed", "listen", *listen, "err", err.Error(),
					"then", "probing goes on without /metrics and /healthz")
			}
		}()
		defer srv.Close()
	}
	log.Info("probe.running", "gateways", a.prober.Gateways(), "holder", a.origin)
	// SIGHUP must not kill a prober that a fleet-wide `kill -HUP` reached: it says it does not
	// reload instead.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Warn("probe.reload_unsupported", "then", "restart `payrouter probe` to read the configuration again")
			}
		}
	}()
	a.run(ctx)
	log.Info("probe.stopped")
	return nil
}

// app is one running payrouter: everything serve (or probe) wires together.
type app struct {
	cfg    *config.Config // as started: the settings a reload cannot change come from here
	log    *slog.Logger
	origin string // this process, as the fleet and the probe leases know it
	// path and getenv are where a reload reads the configuration from.
	path   string
	getenv func(string) string
	// store is the money state (memstore, or pgstore for a fleet); forced keeps the breakers'
	// forced states (Redis through shared for a fleet, else memstore).
	store   payrouter.Store
	forced  payrouter.BreakerStateStore
	shared  *statestore.Store // the fleet's Redis; nil without state.redis_url
	fleet   *resilience.Fleet // nil without state.redis_url
	prober  *resilience.Prober
	metrics *telemetry.Metrics
	obs     *telemetry.Observer
	domains *resilience.Domains
	router  *routing.Router
	// worker drains the task queue and reconciler resolves processing charges; nil in `probe`.
	worker     *fallback.Worker
	reconciler *settle.Reconciler
	closers    []func()

	// reloadMu orders reloads. live is the configuration in use; adapters and checks are the
	// gateways' adapters (of removed gateways too, for the charges they hold) and probe checks.
	reloadMu sync.Mutex
	live     atomic.Pointer[config.Config]
	creds    *httpapi.Credentials // the API keys and admin token both listeners check
	limits   *httpapi.Limits      // per-key rates and the failed-auth throttle of both listeners
	adapters map[string]payrouter.Gateway
	checks   map[string]resilience.HealthCheck
	// listeners are serve's storefront and admin listeners, whose certificates a reload renews.
	listeners []*listener.Listener
	// clients are the domain clients the adapters were built on: a reload that renews a
	// gateway's connections (a rotated TLS file) rebuilds its adapters on the new ones.
	clients map[string]*http.Client
}

// workerIdle is how long a queued task handed to an instance waits before another may take it:
// more than twice the longest task, two gateway calls (the worker bounds each task by half of it), so a
// task is never worked twice at once, and no less than 10s.
func workerIdle(cfg *config.Config) time.Duration {
	idle := 10 * time.Second
	for _, g := range cfg.Gateways {
		for _, op := range payrouter.Operations {
			idle = max(idle, 4*g.TimeoutFor(op)+time.Second)
		}
	}
	return idle
}

// newApp wires the configuration into a running set of parts, without listening yet. role names
// the process in its origin ("serve" or "probe"); path and getenv are where reload reads.
func newApp(ctx context.Context, cfg *config.Config, log *slog.Logger, role, path string, getenv func(string) string) (*app, error) {
	host, _ := os.Hostname()
	a := &app{cfg: cfg, log: log, metrics: telemetry.NewMetrics(), origin: fmt.Sprintf("%s/%s/%d", host, role, os.Getpid()),
		path: path, getenv: getenv, adapters: map[string]payrouter.Gateway{}, checks: map[string]resilience.HealthCheck{},
		clients: map[string]*http.Client{}}
	a.live.Store(cfg)
	a.creds = httpapi.NewAuthCredentials(cfg.Auth)
	a.obs = telemetry.NewObserver(a.metrics, log)
	settings, err := cfg.GatewaySettings()
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	a.domains = resilience.NewDomains(settings, a.obs)
	a.limits = httpapi.NewLimits(cfg.Limits, cfg.Auth.APIKeys)
	a.domains.SetKeyShare(cfg.KeyShareFor())
	a.closers = append(a.closers, a.domains.Close)
	a.initMetrics(cfg, cfg.GatewayNames)

	if err := a.openStores(ctx, role); err != nil {
		a.close()
		return nil, err
	}
	if _, err := a.wireGateways(cfg, nil); err != nil {
		a.close()
		return nil, &exitError{code: 2, err: err}
	}
	var leases payrouter.Leases
	if a.shared != nil {
		leases = a.shared
	}
	a.prober = resilience.NewProber(a.domains, a.checks, a.obs, resilience.ProberOptions{
		Leases: leases, Holder: a.origin, Log: log, Failed: a.metrics.CoordinationFailed,
	})

	a.router, err = routing.New(routing.Config{
		Routes: cfg.Routes, Gateways: a.adapters, Domains: a.domains, Charges: a.store,
		Budget: cfg.RequestTimeout, Log: log,
		Refunds: a.store, Queue: a.store, Observer: a.metrics.RouterObserver(),
		RefundFallback: fallback.Policy(cfg.Fallbacks.Refund), StatusFallback: fallback.Policy(cfg.Fallbacks.Status),
	})
	if err != nil {
		a.close()
		return nil, &exitError{code: 2, err: err}
	}
	if role == "serve" {
		// The money work done later: queued refunds, voids, rechecks of late approvals, and
		// charges whose outcome is not known yet. Every instance drains the shared queue (a task
		// is handed to one at a time); one at a time reconciles, by lease.
		a.worker = &fallback.Worker{
			Queue: a.store, Consumer: a.origin, Handle: a.router.Settler().Work, Log: log, Depth: a.metrics.QueueDepth,
			Idle: workerIdle(cfg),
		}
		a.reconciler = &settle.Reconciler{Settler: a.router.Settler(), Leases: leases, Holder: a.origin, Log: log}
	}
	return a, nil
}

// initMetrics shows the breakers and bulkheads of the named gateways from the start, with their
// cooldowns: a dashboard's rate() and the alert rules need the series before the first change.
func (a *app) initMetrics(cfg *config.Config, names []string) {
	for _, name := range names {
		g := cfg.Gateways[name]
		a.metrics.InitBulkhead(name, g.MaxConcurrent)
		for _, op := range payrouter.Operations {
			if b := a.domains.Breaker(name, op); b != nil {
				a.metrics.InitBreaker(name, op, b.State())
				a.metrics.BreakerCooldown(name, op, g.Breaker.Cooldown)
			}
		}
	}
}

// wireGateways builds the adapter of every gateway of cfg on its domain's client, and a probe
// check on the domain's probe client (a connection pool of its own, with the same TLS settings)
// for each out-of-band one, into a.adapters and a.checks. Both clients come from resilience,
// which builds them with gatewayhttp.NewClient: no redirect is ever followed. A gateway whose
// configuration and clients are the same as in prev (nil: none) keeps the ones it has; those of
// removed gateways stay in a.adapters for the charges they hold. It returns the gateways whose
// probe check is new.
func (a *app) wireGateways(cfg, prev *config.Config) (renewedChecks []string, err error) {
	adapters := maps.Clone(a.adapters)
	clients := maps.Clone(a.clients)
	checks := map[string]resilience.HealthCheck{}
	for _, name := range cfg.GatewayNames {
		g := cfg.Gateways[name]
		client := a.domains.Client(name)
		if prev != nil && reflect.DeepEqual(prev.Gateways[name], g) && a.clients[name] == client {
			if c := a.checks[name]; c != nil {
				checks[name] = c
			}
			continue
		}
		gw, err := gateways.New(g.Kind, g.BaseURL, g.Credentials, client)
		if err != nil {
			return nil, fmt.Errorf("gateways.%s: %w", name, err)
		}
		adapters[name], clients[name] = gw, client
		if g.Breaker.OutOfBand() {
			pgw, err := gateways.New(g.Kind, g.BaseURL, g.Credentials, a.domains.ProbeClient(name))
			if err != nil {
				return nil, fmt.Errorf("gateways.%s: %w", name, err)
			}
			checks[name] = pgw.Health
			renewedChecks = append(renewedChecks, name)
		}
	}
	a.adapters, a.checks, a.clients = adapters, checks, clients
	return renewedChecks, nil
}

// reload re-reads the configuration file and applies what can change while serving, in place:
// gateways (added, changed, removed), routes, fallbacks, the API keys and admin token, and the limits. Gateways whose configuration is the
// same keep their breakers, bulkheads and connections; a changed one keeps each part whose own
// settings did not change (resilience.Domains.Update). Charges under way finish on the settings
// they started with. A file that does not load is refused with its problems and nothing changes.
// Settings that need a restart (listeners, request_timeout, state, idempotency) are reported
// and keep their running values; the listeners' TLS files are read again, and their
// certificates renewed for new connections. Each reload is counted in payrouter_config_reloads_total and
// logged (config.reloaded or config.reload_refused).
func (a *app) reload(how string) (config.Changes, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	running := a.live.Load()
	next, err := config.Load(a.path, a.getenv, gateways.Kinds())
	var settings []resilience.GatewaySettings
	if err == nil {
		next = config.Reloadable(running, next)
		err = dryRunAdapters(next)
	}
	if err == nil {
		settings, err = next.GatewaySettings() // the TLS files, read again
	}
	if err != nil {
		a.metrics.ConfigReloaded(false)
		var problems []string
		var verr *config.ValidationError
		if errors.As(err, &verr) {
			problems = verr.Problems
		} else {
			problems = []string{err.Error()}
		}
		a.log.Error("config.reload_refused", "how", how, "path", a.path, "problems", problems,
			"then", "the running configuration stays")
		return config.Changes{}, fmt.Errorf("%w: %w", httpapi.ErrConfigRefused, err)
	}

	changes := config.Diff(running, next)
	report, err := a.domains.Update(settings)
	if err != nil { // config refuses what Update would; this is a bug
		a.metrics.ConfigReloaded(false)
		a.log.Error("config.reload_refused", "how", how, "err", err.Error())
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
	renewedChecks, err := a.wireGateways(next, running)
	if err == nil {
		err = a.router.Update(next.Routes, a.adapters, fallback.Policy(next.Fallbacks.Refund), fallback.Policy(next.Fallbacks.Status))
	}
	if err != nil {
		// dryRunAdapters and config validation make this unreachable; should it happen, the
		// domains are new and the router is not: say so loudly.
		a.metrics.ConfigReloaded(false)
		a.log.Error("config.reload_failed", "how", how, "err", err.Error())
		return config.Changes{}, err
	}
	a.prober.Update(a.checks, renewedChecks)
	if a.worker != nil {
		a.worker.SetIdle(workerIdle(next))
	}
	a.creds.SetAuth(next.Auth)
	a.limits.Set(next.Limits, next.Auth.APIKeys)
	a.domains.SetKeyShare(next.KeyShareFor())
	a.metrics.ForgetGateways(changes.Gateways.Removed)
	a.initMetrics(next, slices.Concat(changes.Gateways.Added, changes.Gateways.Changed))
	certificates := a.reloadCertificates(next)
	a.live.Store(next)
	a.metrics.ConfigReloaded(true)
	a.log.Info("config.reloaded", "how", how, "path", a.path, "certificates_reloaded", certificates,
		"added", changes.Gateways.Added, "changed", changes.Gateways.Changed, "removed", changes.Gateways.Removed,
		"renewed", changes.Renewed, "routes_changed", changes.Routes, "fallbacks_changed", changes.Fallbacks, "auth_changed", changes.Auth, "limits_changed", changes.Limits,
		"restart_needed", changes.RestartNeeded)
	for _, w := range next.Check().Warnings {
		a.log.Warn("config.warning", "warning", w)
	}
	return changes, nil
}

// Reload is POST /admin/reload (httpapi.Reloader).
func (a *app) Reload(context.Context) (config.Changes, error) { return a.reload("admin") }

// Summary lists the gateways now configured, for /admin/gateways (httpapi.Reloader).
func (a *app) Summary() []config.GatewaySummary { return a.live.Load().Summary() }

// openStores opens the two state stores the configuration names (DESIGN.md, State stores): the
// money state in memory or in PostgreSQL, never forked; and, for a fleet, the coordination state
// in Redis behind statestore, so that a Redis outage leaves the instance serving on its own
// breakers. `probe` moves no money: it opens no database.
func (a *app) openStores(ctx context.Context, role string) error {
	var bounds []memstore.Option
	if a.cfg.State.DatabaseURL == "" { // the money state is in memory: bound it (docs/limits.md)
		bounds = append(bounds, memstore.WithBounds(a.cfg.State.Retention, a.cfg.State.MaxCharges))
	}
	mem := memstore.New(bounds...)
	a.closers = append(a.closers, a.closing("state.memory", mem.Close))
	a.store, a.forced = mem, mem
	if len(bounds) > 0 {
		a.metrics.WatchMemoryStore(func() float64 { return float64(mem.ChargesLen()) }, func() float64 { return float64(mem.Evicted()) })
	}
	if url := a.cfg.State.DatabaseURL; url != "" && role == "serve" {
		pg, err := pgstore.Open(ctx, url, pgstore.Options{
			Timeout: a.cfg.State.DatabaseTimeout, Log: a.log, NoMigrate: !a.cfg.State.DatabaseMigrate,
			Retention: pgstore.Retention{Charges: a.cfg.State.Retention},
		})
		if err != nil {
			return fmt.Errorf("state.database_url: %w", err)
		}
		a.closers = append(a.closers, a.closing("state.database_url", pg.Close))
		a.store = pg
	}
	if a.cfg.State.RedisURL == "" {
		return nil
	}
	rs, err := redisstore.Open(a.cfg.State.RedisURL, redisstore.Options{Timeout: a.cfg.State.RedisTimeout, Log: a.log})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	a.closers = append(a.closers, a.closing("state.redis_url", rs.Close))
	a.shared = statestore.New(rs, statestore.Options{
		Unavailable: redisstore.IsUnavailable,
		Log:         a.log,
		OnChange: func(up bool) {
			a.metrics.StateStoreUp(up)
			if up {
				ctx, cancel := context.WithTimeout(context.Background(), 10*a.cfg.State.RedisTimeout)
				defer cancel()
				if err := a.fleet.Resync(ctx); err != nil {
					a.log.Warn("fleet.resync_failed", "err", err.Error())
				}
			}
		},
	})
	a.forced = a.shared
	a.fleet = resilience.NewFleet(a.domains, a.shared, resilience.FleetOptions{
		Origin: a.origin, Timeout: a.cfg.State.RedisTimeout, Up: a.shared.Up, Log: a.log,
		Failed: a.metrics.CoordinationFailed,
	})
	// An instance started while a breaker is open comes back open; with Redis away it starts on
	// local breakers, and /readyz says so.
	if err := a.fleet.Sync(ctx); err != nil {
		a.log.Warn("fleet.sync_failed", "err", err.Error(), "then", "serving on local breakers until the state store answers")
	}
	return nil
}

// watchDatabase pings the money store every second until ctx ends, and on every change says so:
// payrouter_database_up, and database.down (with the error) or database.up (with the outage's
// length). While it is down every money request answers 503 state-unavailable by itself (the
// store's own errors); this is what ops see of it.
func (a *app) watchDatabase(ctx context.Context) {
	if a.cfg.State.DatabaseURL == "" {
		return
	}
	up, since := true, time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, a.cfg.State.DatabaseTimeout)
		err := a.store.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err != nil && up:
			up, since = false, time.Now()
			a.metrics.DatabaseUp(false)
			a.log.Error("database.down", "err", err.Error(),
				"then", "charges, captures, voids, refunds and look-ups answer 503 state-unavailable; no gateway is called")
		case err == nil && !up:
			up = true
			a.metrics.DatabaseUp(true)
			a.log.Info("database.up", "down_for_ms", time.Since(since).Milliseconds())
		}
	}
}

// run runs what works in the background (the state store's health check, the fleet's sync, the
// prober) until ctx ends.
func (a *app) run(ctx context.Context) {
	var wg sync.WaitGroup
	if a.shared != nil {
		wg.Go(func() { a.shared.Run(ctx) })
		wg.Go(func() { a.fleet.Run(ctx) })
	}
	wg.Go(func() { a.prober.Run(ctx) })
	if a.worker != nil {
		wg.Go(func() { a.watchDatabase(ctx) })
		wg.Go(func() { a.worker.Run(ctx) })
		wg.Go(func() { a.reconciler.Run(ctx) })
	}
	wg.Wait()
}

// close releases what newApp opened, the last opened first.
func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// closing is a closer that logs what close returns: it is the last word on what a store did
// with its connections, and nobody else hears it.
func (a *app) closing(what string, close func() error) func() {
	return func() {
		if err := close(); err != nil {
			a.log.Warn("close_failed", "what", what, "err", err.Error())
		}
	}
}

// serve is `payrouter serve`: both listeners until ctx ends, then a drain of in-flight requests.
func serve(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	cfg, path, err := loadConfig("serve", args, getenv, stderr)
	if err != nil {
		return err
	}
	if err := validateStart(ctx, path, cfg, getenv); err != nil {
		return err // what `payrouter check` says of it
	}
	log := telemetry.NewLogger(stderr)
	shutdownTracing, err := telemetry.SetupTracing(ctx, getenv, telemetry.BuildVersion())
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	telemetry.LogTracingErrors(log)
	defer func() { // after the drain: the last requests' spans go out too
		flushCtx, cancelFlush := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelFlush()
		if err := shutdownTracing(flushCtx); err != nil {
			log.Warn("tracing.shutdown_failed", "err", err.Error())
		}
	}()
	for _, w := range cfg.Check().Warnings {
		log.Warn("config.warning", "warning", w) // what `payrouter check` would have said
	}
	a, err := newApp(ctx, cfg, log, "serve", path, getenv)
	if err != nil {
		return err
	}
	defer a.close()
	bg, stopBackground := context.WithCancel(context.Background())
	var background sync.WaitGroup
	background.Go(func() { a.run(bg) })
	defer background.Wait()
	defer stopBackground()

	deps := httpapi.Deps{
		Credentials: a.creds, Router: a.router, Store: a.store, Forced: a.forced,
		Domains: a.domains, Fleet: a.fleet, Metrics: a.metrics, Gateways: cfg.Summary(), Reloader: a,
		IdempotencyTTL: cfg.Idempotency.TTL, Limits: a.limits, Log: log,
	}
	if a.shared != nil {
		deps.Coordination = a.shared
	}
	servers := []*http.Server{
		newHTTPServer(cfg.Listen, httpapi.NewServer(deps), cfg.RequestTimeout, log),
		newHTTPServer(cfg.AdminListen, httpapi.NewAdminServer(deps), cfg.RequestTimeout, log),
	}
	listeners, err := a.openListeners(cfg, servers)
	if err != nil {
		return err
	}
	a.listeners = listeners
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() {
			if err := srv.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	log.Info("payrouter.serving", "listen", listeners[0].Addr().String(), "admin_listen", listeners[1].Addr().String(),
		"tls", listeners[0].TLS(), "admin_tls", listeners[1].TLS(),
		"gateways", cfg.GatewayNames, "state", a.stateName(), "origin", a.origin)

	// SIGHUP re-reads the configuration, as POST /admin/reload does.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
serving:
	for {
		select {
		case <-ctx.Done():
			break serving
		case err := <-errc:
			return err
		case <-hup:
			// Logged and counted either way; audited as POST /admin/reload is, the actor being
			// whoever may signal the process on its host.
			result := "ok"
			if _, err := a.reload("SIGHUP"); errors.Is(err, httpapi.ErrConfigRefused) {
				result = "invalid-config"
			} else if err != nil {
				result = "internal"
			}
			log.Info("audit", "action", "reload", "actor", "signal:SIGHUP", "client_address", "local", "result", result)
		}
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

// newHTTPServer sets every timeout: a slow client must not hold a connection open for ever. What
// net/http itself has to say (a TLS handshake error, a panic it recovered) goes to log as JSON.
func newHTTPServer(addr string, h http.Handler, budget time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      budget + 15*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    32 << 10,
	}
}

// stateName says where the state lives, for the start-up log line (never the URL: it may hold a
// password).
func (a *app) stateName() string {
	switch {
	case a.shared != nil:
		return "postgresql+redis"
	case a.cfg.State.DatabaseURL != "":
		return "postgresql"
	}
	return "memory"
}
