package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/memstore"
)

// How full TestBenchScale fills the stores. Each size is read from its environment variable, so
// that a quick run can use fewer (the table says which it used):
//
//	PAYROUTER_BENCH_ROWS=100000 PAYROUTER_BENCH_MEMSTORE_CHARGES=100000 make bench   # a quick run
const (
	// rowsEnv is how many charges, and as many events, the filled database holds; rowsDefault
	// when unset: issue 21's size. Filling 10 M rows of each table took this 2-CPU machine 4
	// minutes and 17 GB of disk for the while of the test (the database is dropped after it).
	rowsEnv     = "PAYROUTER_BENCH_ROWS"
	rowsDefault = 10_000_000
	// memstoreChargesEnv is how many charges (each with its Idempotency-Key and events) the
	// filled memstore holds; memstoreChargesDefault when unset.
	memstoreChargesEnv     = "PAYROUTER_BENCH_MEMSTORE_CHARGES"
	memstoreChargesDefault = 1_000_000
)

// benchSize is the positive integer in the environment variable name, or def when it is unset.
func benchSize(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of rows", name, v)
	}
	return n
}

// fillDatabase adds n charges and n events to the database at url, with one generate_series
// INSERT per table: each a copy of the newest charge (and event) payrouter wrote there, under ids
// of their own (ch_fill..., evt_fill...), so that their size and shape are a real charge's. One
// charge must have been made through payrouter first. It then VACUUM ANALYZEs both tables, as
// autovacuum would long before a production table reached that size, so that the planner knows
// them. It returns how long the inserts took.
func fillDatabase(t *testing.T, url string, n int) time.Duration {
	t.Helper()
	conn := connect(t, url)
	defer conn.Close(context.Background())
	ctx := t.Context()
	start := time.Now()
	// Each copy keeps the template's fields but its id (and the event's charge id), and is
	// written as created and last updated now: no retention sweep takes it during the run.
	if _, err := conn.Exec(ctx, `
INSERT INTO charges (id, status, charge, created_at, version)
SELECT 'ch_fill' || lpad(i::text, 19, '0'), t.status, jsonb_set(t.charge, '{id}', to_jsonb('ch_fill' || lpad(i::text, 19, '0'))), now(), 1
FROM (SELECT status, charge FROM charges ORDER BY created_at DESC LIMIT 1) t, generate_series(1, $1) i`, n); err != nil {
		t.Fatalf("filling charges: %v", err)
	}
	if _, err := conn.Exec(ctx, `
INSERT INTO events (id, owner, type, charge_id, object, created_at)
SELECT 'evt_fill' || lpad(i::text, 19, '0'), t.owner, t.type, 'ch_fill' || lpad(i::text, 19, '0'),
       jsonb_set(t.object, '{id}', to_jsonb('ch_fill' || lpad(i::text, 19, '0'))), now()
FROM (SELECT owner, type, object FROM events ORDER BY seq DESC LIMIT 1) t, generate_series(1, $1) i`, n); err != nil {
		t.Fatalf("filling events: %v", err)
	}
	took := time.Since(start)
	for _, table := range []string{"charges", "events"} {
		if _, err := conn.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			t.Fatalf("VACUUM ANALYZE %s: %v", table, err)
		}
	}
	return took
}

// bytesPerRow is pg_total_relation_size of each table (the table, its TOAST and its indexes) over
// its rows, in the database at url.
func bytesPerRow(t *testing.T, url string, tables ...string) map[string]float64 {
	t.Helper()
	conn := connect(t, url)
	defer conn.Close(context.Background())
	out := map[string]float64{}
	for _, table := range tables {
		var size, rows int64
		if err := conn.QueryRow(t.Context(), `SELECT pg_total_relation_size($1::regclass), (SELECT count(*) FROM `+table+`)`, table).Scan(&size, &rows); err != nil {
			t.Fatalf("the size of %s: %v", table, err)
		}
		if rows > 0 {
			out[table] = float64(size) / float64(rows)
		}
	}
	return out
}

// fillMemstore stores n charges in s as payments stores a charge answered 201: its
// Idempotency-Key claimed, the charge saved processing, then completed with the key in one step
// (the answer rendered from the charge, no body kept). Each is a copy of template (a charge
// payrouter made) under an id and key of its own. It returns the live heap the store grew by, per
// charge (runtime.ReadMemStats after collections, before and after).
func fillMemstore(t *testing.T, s *memstore.Store, template *payrouter.Charge, n int) (heapPerCharge float64) {
	t.Helper()
	ctx := t.Context()
	raw, err := json.Marshal(template)
	if err != nil {
		t.Fatal(err)
	}
	before := liveHeap()
	for i := range n {
		c := new(payrouter.Charge)
		if err := json.Unmarshal(raw, c); err != nil {
			t.Fatal(err)
		}
		c.ID = fmt.Sprintf("ch_fill%019d", i)
		c.Status, c.CreatedAt, c.UpdatedAt = payrouter.StatusProcessing, time.Now().UTC(), time.Now().UTC()
		fp := fmt.Sprintf("%064x", i)
		_, h, err := s.Claim(ctx, c.Owner, payrouter.IdempotencyStoreKey(c.Owner, "fill-"+strconv.Itoa(i)), fp, 10*time.Second)
		if err != nil {
			t.Fatalf("filling the memstore, charge %d: %v", i, err)
		}
		if err := s.SaveCharge(ctx, c); err != nil {
			t.Fatalf("filling the memstore, charge %d: %v", i, err)
		}
		c.Status = template.Status
		rec := payrouter.IdempotencyRecord{Fingerprint: fp, Status: 201, ChargeID: c.ID, CreatedAt: time.Now().UTC()}
		if err := s.CompleteCharge(ctx, c, h, rec, 24*time.Hour); err != nil {
			t.Fatalf("filling the memstore, charge %d: %v", i, err)
		}
	}
	return float64(liveHeap()-before) / float64(n)
}

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
