package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/health"
	"github.com/payrouter/payrouter/memstore"
	"github.com/payrouter/payrouter/pgstore"
	"github.com/payrouter/payrouter/redisstore"
	"github.com/payrouter/payrouter/resilience"
	"github.com/payrouter/payrouter/statestore"
)

// openStores opens the configuration's two state stores (docs/architecture.md, State stores): the
// money state in memory or in PostgreSQL, never forked; and, for a fleet, the coordination state
// in Redis behind statestore, so that a Redis outage leaves the instance serving on its own
// breakers. Probe moves no money: it opens no database. given, when set, is the money state
// instead (Options.Store); the caller closes it.
func (s *Service) openStores(ctx context.Context, given payrouter.Store) error {
	var bounds []memstore.Option
	if s.cfg.State.DatabaseURL == "" { // the money state is in memory: bound it (docs/limits.md)
		bounds = append(bounds, memstore.WithBounds(s.cfg.State.Retention, s.cfg.MemoryPerKey()))
	}
	mem := memstore.New(bounds...)
	s.closers = append(s.closers, s.closing("state.memory", mem.Close))
	s.store = mem
	if len(bounds) > 0 {
		s.metrics.WatchMemoryStore(mem)
		if given == nil {
			s.mem = mem
		}
	}
	if given != nil {
		s.store = given
	} else if url := s.cfg.State.DatabaseURL; url != "" && s.role == Serve {
		pg, err := s.openDatabase(ctx, url)
		if err != nil {
			return fmt.Errorf("state.database_url: %w", err)
		}
		s.closers = append(s.closers, s.closing("state.database_url", pg.Close))
		s.store = pg
	}
	if s.cfg.State.RedisURL == "" {
		return nil
	}
	rs, err := redisstore.Open(s.cfg.State.RedisURL, redisstore.Options{Timeout: s.cfg.State.RedisTimeout, Log: s.log})
	if err != nil {
		return refused(err)
	}
	s.closers = append(s.closers, s.closing("state.redis_url", rs.Close))
	s.shared = statestore.New(rs, statestore.Options{
		Unavailable: redisstore.IsUnavailable,
		Log:         s.log,
		OnChange: func(up bool) {
			s.metrics.StateStoreUp(up)
			if up {
				ctx, cancel := context.WithTimeout(context.Background(), 10*s.cfg.State.RedisTimeout)
				defer cancel()
				if err := s.fleet.Resync(ctx); err != nil {
					s.log.Warn("fleet.resync_failed", "err", err.Error())
				}
			}
		},
	})
	s.fleet = resilience.NewFleet(s.domains, s.shared, resilience.FleetOptions{
		Origin: s.origin, Timeout: s.cfg.State.RedisTimeout, Up: s.shared.Up, Log: s.log,
		Failed: s.metrics.CoordinationFailed,
	})
	// An instance started while a breaker is open comes back open; with Redis away it starts on
	// local breakers, and /readyz says so.
	if err := s.fleet.Sync(ctx); err != nil {
		s.log.Warn("fleet.sync_failed", "err", err.Error(), "then", "serving on local breakers until the state store answers")
	}
	return nil
}

// watchDatabase pings the money store every second until ctx ends, and on every change says so:
// payrouter_database_up, and database.down (with the error) or database.up (with the outage's
// length). While it is down every money request answers 503 state-unavailable by itself (the
// store's own errors); this is what ops see of it. It is the health.Watch statestore keeps of
// Redis, with the database's names.
func (s *Service) watchDatabase(ctx context.Context) {
	if s.cfg.State.DatabaseURL == "" {
		return
	}
	health.NewWatch(s.store.Ping, health.Options{
		Name:      "database",
		Every:     time.Second,
		Timeout:   s.cfg.State.DatabaseTimeout,
		DownLevel: slog.LevelError,
		Then:      "charges, captures, voids, refunds and look-ups answer 503 state-unavailable; no gateway is called",
		OutageKey: "down_for_ms",
		Log:       s.log,
		OnChange:  s.metrics.DatabaseUp,
	}).Run(ctx)
}

// DatabaseStartWait bounds how long serve waits at start for a database that does not answer
// (restarting, failing over, or slow on a loaded host) before it gives up and exits: an
// instance started beside a database coming back joins once it answers, rather than exiting
// at the first refused connection and waiting on its supervisor's back-off. A database that
// answers and refuses (a wrong password, an unknown database, a schema newer than this
// version) ends the start at once: waiting would not change it.
const DatabaseStartWait = 30 * time.Second

// openDatabase opens the PostgreSQL money store, asking again (250 ms, doubling to 2 s) while
// it is unavailable, for at most DatabaseStartWait, with a state_store.waiting line per try.
func (s *Service) openDatabase(ctx context.Context, url string) (*pgstore.Store, error) {
	opts := pgstore.Options{
		Timeout: s.cfg.State.DatabaseTimeout, Log: s.log, NoMigrate: !s.cfg.State.DatabaseMigrate,
		Retention: pgstore.Retention{Charges: s.cfg.State.Retention},
	}
	deadline := time.Now().Add(DatabaseStartWait)
	wait := 250 * time.Millisecond
	for try := 1; ; try++ {
		pg, err := pgstore.Open(ctx, url, opts)
		if err == nil || !errors.Is(err, payrouter.ErrStateUnavailable) || time.Now().Add(wait).After(deadline) {
			return pg, err
		}
		s.log.WarnContext(ctx, "state_store.waiting", "store", "database", "try", try, "retry_in", wait.String(), "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
