package pgstore

import (
	"database/sql"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// migrateTo applies the migrations up to version only, as a database of an older payrouter has.
func migrateTo(t *testing.T, url string, version int64) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	fsys, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationHashesIdempotencyKeys: keys stored by a payrouter that kept them in clear
// ("<scope>:<key>") are turned into the digest this version computes in Go
// (payrouter.IdempotencyStoreKey), so that a key claimed before the upgrade and retried after
// it finds its answer (replayed, not charged again) or its claim (in flight); and no row keeps
// a caller's key.
func TestMigrationHashesIdempotencyKeys(t *testing.T) {
	url := pgtest.NewDatabase(t)
	migrateTo(t, url, 1)

	const scope = "0123456789abcdef"
	var every strings.Builder // every printable ASCII character, in one key
	for c := byte(0x20); c <= 0x7e; c++ {
		every.WriteByte(c)
	}
	completed := []string{"order-42", "550e8400-e29b-41d4-a716-446655440000", every.String(), `quote'"back\slash`, "a:b:c"}
	const inFlight = "still-running-7"

	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, k := range completed {
		if _, err := db.ExecContext(t.Context(), `INSERT INTO idempotency_keys
			(key, fingerprint, token, held_until, expires_at, status, header, body, created_at)
			VALUES ($1, 'fp-'||$1, nextval('idempotency_tokens'), NULL, now() + interval '1 hour', 201,
				'{"Content-Type":"application/json"}', convert_to('{"id":"ch_1"}', 'UTF8'), now())`, scope+":"+k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(t.Context(), `INSERT INTO idempotency_keys (key, fingerprint, token, held_until, expires_at)
		VALUES ($1, 'fp-run', nextval('idempotency_tokens'), now() + interval '1 hour', now() + interval '2 hours')`,
		scope+":"+inFlight); err != nil {
		t.Fatal(err)
	}

	if err := Migrate(t.Context(), url); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	wantEachAppliedOnce(t, url)

	rows, err := db.QueryContext(t.Context(), `SELECT key FROM idempotency_keys`)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		stored[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range append(completed, inFlight) {
		want := payrouter.IdempotencyStoreKey(scope, k)
		if !stored[want] {
			t.Errorf("key %q: want its digest %s stored (the Go and SQL digests must agree); stored: %v", k, want, stored)
		}
	}
	for k := range stored {
		for _, raw := range append(completed, inFlight) {
			if strings.Contains(k, raw) {
				t.Errorf("stored key %q holds the caller's key %q", k, raw)
			}
		}
	}

	// Retried after the upgrade: the answer is replayed, the claim still held.
	s := open(t, url, Options{})
	for _, k := range completed {
		rec, _, err := s.Claim(t.Context(), "", payrouter.IdempotencyStoreKey(scope, k), "fp-"+scope+":"+k, time.Minute)
		if err != nil || rec == nil || rec.Status != 201 || string(rec.Body) != `{"id":"ch_1"}` {
			t.Errorf("key %q claimed before the upgrade, retried after: %+v, %v; want its answer replayed", k, rec, err)
		}
	}
	if _, _, err := s.Claim(t.Context(), "", payrouter.IdempotencyStoreKey(scope, inFlight), "fp-run", time.Minute); !errors.Is(err, payrouter.ErrInFlight) {
		t.Errorf("key in flight before the upgrade, retried after: %v; want ErrInFlight", err)
	}
}
