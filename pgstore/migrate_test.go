package pgstore

import (
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// appliedVersions reads goose's record of the migrations applied to the database at url.
func appliedVersions(t *testing.T, url string) map[int64]int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), `SELECT version_id FROM goose_db_version WHERE version_id > 0`)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int64]int{}
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&v}, func() error { counts[v]++; return nil }); err != nil {
		t.Fatal(err)
	}
	return counts
}

// wantEachAppliedOnce checks that every embedded migration is recorded exactly once.
func wantEachAppliedOnce(t *testing.T, url string) {
	t.Helper()
	files, err := migrations.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	counts := appliedVersions(t, url)
	if len(counts) != len(files) {
		t.Fatalf("goose_db_version records versions %v; want one per migration file (%d)", counts, len(files))
	}
	for v, n := range counts {
		if n != 1 {
			t.Errorf("migration %d recorded %d times, want once", v, n)
		}
	}
}

// TestMigrateTwice: migrating a migrated database is a no-op, and Open on it works.
func TestMigrateTwice(t *testing.T) {
	url := pgtest.NewDatabase(t)
	for range 2 {
		if err := Migrate(t.Context(), url); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	wantEachAppliedOnce(t, url)
	s := open(t, url, Options{})
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	wantEachAppliedOnce(t, url)
}

// TestOpenConcurrentlyOnAnEmptyDatabase: instances of a fleet starting at the same moment on a
// database never migrated all open, and each migration is applied once (goose's advisory lock
// serializes them).
func TestOpenConcurrentlyOnAnEmptyDatabase(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const instances = 3
	var wg sync.WaitGroup
	for range instances {
		wg.Go(func() {
			s, err := Open(t.Context(), url, Options{})
			if err != nil {
				t.Errorf("Open: %v", err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	wantEachAppliedOnce(t, url)
	// Open again on the migrated database, as every restart does.
	open(t, url, Options{})
	wantEachAppliedOnce(t, url)
}

// TestNoMigrate: an instance told not to migrate (state.database_migrate: false, for a
// transaction-mode pooler) refuses an old schema with a line saying what to run, and opens on a
// current one without taking the migrations' lock.
func TestNoMigrate(t *testing.T) {
	url := pgtest.NewDatabase(t)
	_, err := Open(t.Context(), url, Options{NoMigrate: true})
	if err == nil || !strings.Contains(err.Error(), "payrouter migrate") {
		t.Fatalf("Open without migrating on an empty database = %v; want it refused, naming payrouter migrate", err)
	}
	if err := Migrate(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), url, Options{NoMigrate: true})
	if err != nil {
		t.Fatalf("Open without migrating on a migrated database: %v", err)
	}
	s.Close()
}
