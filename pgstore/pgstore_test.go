package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
	"github.com/payrouter/payrouter/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestStore runs the money-state suite every store passes (memstore's too) against a real
// PostgreSQL: one database for the suite, emptied before each subtest, and a Store opened for
// each, so that every subtest also opens on an already migrated database.
func TestStore(t *testing.T) {
	url := pgtest.NewDatabase(t)
	storetest.Run(t, func(t *testing.T) payrouter.Store {
		s := open(t, url, suiteOptions)
		truncate(t, s)
		return s
	})
}

// TestStoreSimpleProtocol runs the suite with pgx's simple protocol, the mode a transaction
// pooler (PgBouncer) in front of the database needs: every argument must mean the same there,
// JSON documents included (sent as bytea, they were refused).
func TestStoreSimpleProtocol(t *testing.T) {
	url := pgtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	url += sep + "default_query_exec_mode=simple_protocol"
	storetest.Run(t, func(t *testing.T) payrouter.Store {
		s := open(t, url, suiteOptions)
		truncate(t, s)
		return s
	})
}

// suiteOptions are the store's for the storetest suite: its racing cases (8 writers on one
// charge, 40 claims of one key) queue on a row's lock, and under -race on a loaded 2-core
// machine a queue outlasted the 800 ms a call is given in production, failing a case about
// what is written, not how fast. The production bound has its own tests (outage_test.go).
var suiteOptions = Options{Timeout: 30 * time.Second}

// open opens a Store on url for the test, closed when it ends.
func open(t testing.TB, url string, opts Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// truncate empties every table. The token sequence goes on: tokens never repeat, not even
// across tests.
func truncate(t testing.TB, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*s.opts.Timeout)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `TRUNCATE charges, refunds, idempotency_keys, tasks, events, webhook_cursors, webhook_dead_letters, webhook_endpoints_disabled RESTART IDENTITY`); err != nil {
		t.Fatalf("emptying the tables: %v", err)
	}
}
