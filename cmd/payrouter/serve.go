package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/payrouter/payrouter/config"
	"github.com/payrouter/payrouter/pgstore"
	"github.com/payrouter/payrouter/service"
	"github.com/payrouter/payrouter/telemetry"
)

// loadConfig parses the -config flag and loads the file as service.Load does, with every check
// serve makes before it starts; every problem is one line on stderr and the exit code is 2. It
// returns the file's path too.
func loadConfig(ctx context.Context, cmd string, args []string, getenv func(string) string, stderr io.Writer) (*config.Config, string, error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	if err := fs.Parse(args); err != nil {
		return nil, "", &exitError{code: 2}
	}
	cfg, err := loadConfigFile(ctx, cmd, *path, getenv)
	return cfg, *path, err
}

// loadConfigFile loads the file -config named (service.Load).
func loadConfigFile(ctx context.Context, cmd, path string, getenv func(string) string) (*config.Config, error) {
	if path == "" {
		return nil, usageError("%s: -config FILE is required", cmd)
	}
	cfg, err := service.Load(ctx, path, getenv)
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return cfg, nil
}

// check is `payrouter check`: validate, then print the capacity arithmetic and warnings.
func check(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, _, err := loadConfig(context.Background(), "check", args, getenv, stderr)
	if err != nil {
		return err
	}
	_, err = cfg.Check().WriteTo(stdout)
	return err
}

// migrate is `payrouter migrate`: the database's schema brought to this build's version, for a
// deploy that runs it before the new instances start (serve applies the same migrations at start,
// so it is never required). Safe while instances run and when several run it at once.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, _, err := loadConfig(ctx, "migrate", args, getenv, stderr)
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
	level := logLevelFlag(fs)
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	cfg, err := loadConfigFile(ctx, "probe", *path, getenv)
	if err != nil {
		return err
	}
	if cfg.State.RedisURL == "" {
		return usageError("probe: a prober beside the instances shares their breakers through state.redis_url; it is empty")
	}
	sink := telemetry.NewLogSink(stderr, telemetry.LogSinkOptions{})
	defer sink.Close() // last: every line, the shutdown's included, is written before exit
	log := telemetry.NewSinkLogger(sink, level, service.InstanceName(service.Probe))
	svc, err := service.New(ctx, cfg, service.Options{Role: service.Probe, Path: *path, Getenv: getenv, Log: log, LogSink: sink})
	if err != nil {
		return exitCodeOf(err)
	}
	defer svc.Close()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return svc.ServeProbe(ctx, *listen, hup)
}

// serve is `payrouter serve`: both listeners until ctx ends, then a drain of in-flight requests.
func serve(ctx context.Context, args []string, getenv func(string) string, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (YAML)")
	level := logLevelFlag(fs)
	if err := fs.Parse(args); err != nil {
		return &exitError{code: 2}
	}
	cfg, err := loadConfigFile(ctx, "serve", *path, getenv) // what `payrouter check` says of it
	if err != nil {
		return err
	}
	// Lines go out from a queue, so that no request waits for stderr (telemetry.LogSink). Closed
	// last: every line, the shutdown's and the tracing flush's included, is written before exit.
	sink := telemetry.NewLogSink(stderr, telemetry.LogSinkOptions{})
	defer sink.Close()
	log := telemetry.NewSinkLogger(sink, level, service.InstanceName(service.Serve))
	shutdownTracing, err := telemetry.SetupTracing(ctx, getenv, telemetry.BuildVersion())
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	telemetry.LogTracingErrors(log)
	defer func() { // after the service stopped: the last requests' spans go out too
		flushCtx, cancelFlush := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancelFlush()
		if err := shutdownTracing(flushCtx); err != nil {
			log.Warn("tracing.shutdown_failed", "err", err.Error())
		}
	}()
	for _, w := range cfg.Check().Warnings {
		log.Warn("config.warning", "warning", w) // what `payrouter check` would have said
	}
	svc, err := service.New(ctx, cfg, service.Options{Role: service.Serve, Path: *path, Getenv: getenv, Log: log, LogSink: sink})
	if err != nil {
		return exitCodeOf(err)
	}
	defer svc.Close()
	// SIGHUP re-reads the configuration, as POST /admin/reload does.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	return svc.Serve(ctx, hup)
}

// logLevel is the value of -log-level: a level ParseLogLevel reads, checked as the command line
// is parsed, so that a wrong one is refused (exit 2, naming the four) before anything starts.
type logLevel struct{ slog.LevelVar }

// String implements flag.Value.
func (l *logLevel) String() string { return strings.ToLower(l.Level().String()) }

// Set implements flag.Value.
func (l *logLevel) Set(name string) error {
	level, err := telemetry.ParseLogLevel(name)
	if err != nil {
		return errors.New("want one of " + strings.Join(telemetry.LogLevels, ", "))
	}
	l.LevelVar.Set(level)
	return nil
}

// logLevelFlag adds -log-level to a command that logs; its zero value is info.
func logLevelFlag(fs *flag.FlagSet) *slog.LevelVar {
	l := new(logLevel)
	fs.Var(l, "log-level", "write the log lines of this `level` and above: debug, info (the default), warn or error")
	return &l.LevelVar
}

// exitCodeOf gives an error of service.New its exit code: 2 for a configuration it refused.
func exitCodeOf(err error) error {
	var ce *service.ConfigError
	if errors.As(err, &ce) {
		return &exitError{code: 2, err: err}
	}
	return err
}
