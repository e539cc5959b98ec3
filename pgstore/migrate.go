package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/payrouter/payrouter"
)

// migrations are the schema's versions, applied in order by goose; each file is one version
// and runs in its own transaction. A change to the schema is a new file, never an edit of one
// already released.
//
//go:embed migrations/*.sql
var migrations embed.FS

// migrateConnectTimeout bounds a connection attempt of Migrate when the URL sets none: the
// migrate command must fail on a database that does not answer, not hang.
const migrateConnectTimeout = 10 * time.Second

// Migrate applies to the database at url every migration this version has that the database
// lacks, for the `payrouter migrate` command; Open does the same at start. Instances starting at
// once serialize on a PostgreSQL advisory lock held for the whole run, so each migration is
// applied exactly once; ctx bounds the run, waiting for that lock included (at most 5 minutes).
func Migrate(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return errors.New("pgstore: migrate: the database URL does not parse: " + scrub(err.Error(), url))
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = migrateConnectTimeout
	}
	_, err = migrate(ctx, cfg, redact(url))
	return err
}

// checkSchema fails unless the database at cfg already has every migration of this version, for
// an Open that does not migrate (Options.NoMigrate): it takes no lock, so it works through a
// transaction-mode pooler, which session advisory locks do not.
func checkSchema(ctx context.Context, cfg *pgx.ConnConfig, where string) error {
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("pgstore: checking the schema: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("pgstore: checking the schema: %w", err)
	}
	pending, err := provider.HasPending(ctx)
	switch {
	case err != nil && IsUnavailable(err):
		return fmt.Errorf("pgstore: checking the schema of %s: %w: %w", where, payrouter.ErrStateUnavailable, err)
	case err != nil:
		return fmt.Errorf("pgstore: checking the schema of %s: %w", where, err)
	case pending:
		return fmt.Errorf("pgstore: the schema of %s is older than this version's: run `payrouter migrate` first (state.database_migrate is false)", where)
	}
	return nil
}

// migrate runs goose's Up through pgx's database/sql driver on a pool of its own, closed
// before it returns, and returns the versions it applied.
func migrate(ctx context.Context, cfg *pgx.ConnConfig, where string) ([]int64, error) {
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	// Polled every second for up to 5 minutes (goose's defaults poll every 5 s): an instance
	// that starts beside one migrating waits about as long as the migration takes. The unlock
	// is bounded tighter than goose's minute: closing the connection releases the lock anyway.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300), lock.WithUnlockTimeout(1, 5))
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		err = fmt.Errorf("migrating %s: %w", where, err)
		if IsUnavailable(err) {
			return nil, fmt.Errorf("pgstore: %w: %w", payrouter.ErrStateUnavailable, err)
		}
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}
