// Package pgstore is the money state of a fleet (docs/architecture.md, State stores):
// payrouter.Store on PostgreSQL through pgx, shared by every instance. Charges, refunds,
// idempotency keys and the durable task queue have this one home; when the database does not
// answer, every method fails within Options.Timeout with an error wrapping
// payrouter.ErrStateUnavailable, and nothing is kept aside to serve from meanwhile.
//
// Idempotency holds are fenced: every Claim takes a token from one database sequence, and every
// write made under a hold (SaveCharge with Charge.Hold, Complete, CompleteCharge) is one SQL
// statement that locks the key's row and writes only while the row still carries that token. A
// holder that stalled past its hold and lost the key to a later request changes nothing.
//
// Every time that decides something (a hold running out, a record expiring, a task idle long
// enough to be handed out again) is the database's now(), so instances whose clocks disagree
// still agree on who holds a key.
//
// # What the SQL relies on
//
// For a PostgreSQL-compatible engine (CockroachDB, YugabyteDB, Citus) to stand in, it must give
// these the meaning PostgreSQL gives them at READ COMMITTED, its default isolation, which every
// statement here is written for:
//   - INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE ... RETURNING inside a WITH, whose WHERE
//     is evaluated on the conflicting row's latest committed version, even one the statement's
//     snapshot does not see (Claim: one winner among concurrent claims);
//   - SELECT ... FOR SHARE, UPDATE, and SELECT ... FOR UPDATE SKIP LOCKED re-reading a row
//     changed by a concurrent transaction and re-checking their conditions on it (fenced
//     writes, Take, the retention sweep);
//   - data-modifying statements in WITH, run as one statement, one feeding another through
//     RETURNING (CompleteCharge, ClaimCharge), and an INSERT whose SELECT finds no row locking
//     nothing (ClaimCharge's replay of a completed key writes nothing);
//   - a sequence (nextval) for the fencing tokens, jsonb and bytea columns, now();
//   - session advisory locks (pg_try_advisory_lock) for goose's migration lock.
//
// An engine that runs them SERIALIZABLE instead answers some races with a serialization
// failure (SQLSTATE 40001) rather than waiting: the caller sees an error that is neither an
// answer nor unavailability, and should retry.
package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/payrouter/payrouter"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds every store call: a database that does not answer is an error well
	// within the second a money request may spend on it (README, "Where state lives").
	DefaultTimeout = 800 * time.Millisecond
	// DefaultChargeRetention is how long a final charge (and a final refund) is kept after it was
	// last written: thirteen months, past the card networks' usual dispute windows and a fiscal
	// year.
	DefaultChargeRetention = 395 * 24 * time.Hour
	// DefaultSweepEvery is how often the retention sweep runs.
	DefaultSweepEvery = time.Minute
	// DefaultSweepBatch is how many rows one sweep statement deletes at most, so that a backlog
	// is deleted in short statements that never hold many locks for long.
	DefaultSweepBatch = 1000
	// DefaultMaxConns is the pool size of one instance when the URL names none
	// (pool_max_conns): pgx's own default, four on a small machine, makes a burst of charges
	// queue for a connection while each statement takes a millisecond. A fleet's instances times
	// this must stay under the server's max_connections (100 by default).
	DefaultMaxConns = 16
)

// Options configure a Store; every zero value means the documented default.
type Options struct {
	// Timeout bounds each store call, waiting for a pooled connection included; a call that
	// runs out of it fails with an error wrapping payrouter.ErrStateUnavailable. 0:
	// DefaultTimeout.
	Timeout time.Duration
	// Log receives the retention sweep's reports and failures. nil: nothing is logged.
	Log *slog.Logger
	// Retention says what the background sweep deletes and how often it runs.
	Retention Retention
	// NoMigrate makes Open check that the schema is current instead of migrating it: for a
	// database reached through a transaction-mode pooler, where the migrations' session lock
	// cannot be held, with `payrouter migrate` run beforehand on a direct connection. false:
	// Open migrates.
	NoMigrate bool

	// tracer sees every query (the benchmark counts round trips with it).
	tracer pgx.QueryTracer
}

// Retention is what the background sweep started by Open deletes: idempotency keys past their
// expiry (always: they count as gone already), and final charges and refunds not written for
// longer than Charges.
type Retention struct {
	// Charges is how long a charge in a final status (anything but processing) and a refund that
	// succeeded or failed are kept after they were last written. 0: DefaultChargeRetention;
	// negative: kept for ever.
	Charges time.Duration
	// Every is how often the sweep runs. 0: DefaultSweepEvery; negative: no sweep at all (another
	// instance, or ops, deletes).
	Every time.Duration
	// Batch bounds the rows one delete statement removes. 0: DefaultSweepBatch.
	Batch int
}

func (o Options) withDefaults() Options {
	o.Timeout = cmp.Or(o.Timeout, DefaultTimeout)
	if o.Timeout < 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Retention.Charges = cmp.Or(o.Retention.Charges, DefaultChargeRetention)
	o.Retention.Every = cmp.Or(o.Retention.Every, DefaultSweepEvery)
	if o.Retention.Batch <= 0 {
		o.Retention.Batch = DefaultSweepBatch
	}
	return o
}

// Store is payrouter.Store on PostgreSQL, safe for concurrent use by any number of goroutines
// and instances sharing the database.
type Store struct {
	pool *pgxpool.Pool
	opts Options
	// where names the database in errors and logs, its password redacted.
	where string

	stopSweep context.CancelFunc
	swept     sync.WaitGroup
	closeOnce sync.Once
}

var _ payrouter.Store = (*Store)(nil)

// CheckURL refuses a database URL that Open would refuse before connecting, with Open's error;
// it connects to nothing (`payrouter check` runs it).
func CheckURL(url string) error {
	_, err := parseURL(url)
	return err
}

// parseURL parses a database URL as Open does, its password kept out of the error.
func parseURL(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx masks the password in its message as best it can; scrub makes sure.
		return nil, errors.New("pgstore: the database URL does not parse: " + scrub(err.Error(), url))
	}
	return cfg, nil
}

// Open connects to the database at url (postgres://user@host:5432/db, or any form pgx parses,
// pool_max_conns and the other pgxpool parameters included), applies the migrations this
// version has that the database lacks (Migrate), and starts the retention sweep. Migrations may
// wait for another instance migrating at the same moment; ctx bounds that wait. Close stops the
// sweep and closes the connections.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	cfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	where := redact(url)
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	// A database that accepts the TCP connection and then says nothing (a stopped process, a
	// black-holed route) must fail the connection attempt as fast as a query.
	if cfg.ConnConfig.ConnectTimeout == 0 || cfg.ConnConfig.ConnectTimeout > opts.Timeout {
		cfg.ConnConfig.ConnectTimeout = opts.Timeout
	}
	if opts.tracer != nil {
		cfg.ConnConfig.Tracer = opts.tracer
	}
	if opts.NoMigrate {
		if err := checkSchema(ctx, cfg.ConnConfig.Copy(), where); err != nil {
			return nil, err
		}
	} else {
		applied, err := migrate(ctx, cfg.ConnConfig.Copy(), where)
		if err != nil {
			return nil, err
		}
		if len(applied) > 0 {
			opts.Log.InfoContext(ctx, "pgstore.migrated", "database", where, "versions", applied)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connecting to %s: %w", where, err)
	}
	s := &Store{pool: pool, opts: opts, where: where}
	if err := s.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	sweepCtx, stop := context.WithCancel(context.Background())
	s.stopSweep = stop
	if opts.Retention.Every > 0 {
		s.swept.Go(func() { s.sweepEvery(sweepCtx) })
	}
	return s, nil
}

// Ping reports whether the database answers within Timeout; /readyz uses it.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return s.fail("ping", err)
	}
	return nil
}

// Close stops the retention sweep, waiting for a sweep that runs, and closes the connections.
// Calling it again is harmless.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stopSweep()
		s.swept.Wait()
		s.pool.Close()
	})
	return nil
}

// bound gives one store call its Timeout.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.Timeout)
}

// redact returns url with its password masked, to name the database in errors and logs; a URL
// that does not parse (a keyword/value DSN) is not shown at all, as it may hold a password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "the database"
	}
	u.RawQuery = "" // sslpassword and password may be query parameters too
	return u.Redacted()
}
