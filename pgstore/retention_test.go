package pgstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// age makes a charge or refund look last written long ago.
func age(t *testing.T, conn *pgx.Conn, table, id string) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), `UPDATE `+table+` SET updated_at = now() - interval '2 hours' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
}

func ids(t *testing.T, conn *pgx.Conn, query string) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), query)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	return got
}

// TestRetention: the sweep Open starts deletes expired idempotency keys and final charges and
// refunds not written for longer than the retention, keeps everything else, and stops at Close.
func TestRetention(t *testing.T) {
	url := pgtest.NewDatabase(t)
	s := open(t, url, Options{Retention: Retention{Every: 50 * time.Millisecond, Charges: time.Hour, Batch: 2}})
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())

	// Keys: completed and expired, in flight and expired (a crashed holder), and live ones.
	for i := range 3 { // more than a batch
		_, h, err := s.Claim(ctx, "", fmt.Sprintf("k-expired-%d", i), fpA, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, h, testRecord(201), time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Claim(ctx, "", "k-crashed", fpA, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, live, err := s.Claim(ctx, "", "k-live", fpA, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, live, testRecord(201), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Claim(ctx, "", "k-held", fpA, time.Hour); err != nil {
		t.Fatal(err)
	}

	for _, c := range []*payrouter.Charge{
		testCharge("ch_old_final", payrouter.StatusSucceeded),
		testCharge("ch_old_declined", payrouter.StatusDeclined),
		testCharge("ch_old_voided", payrouter.StatusVoided),
		testCharge("ch_old_processing", payrouter.StatusProcessing),
		testCharge("ch_new_final", payrouter.StatusSucceeded),
	} {
		if err := s.SaveCharge(ctx, c); err != nil {
			t.Fatal(err)
		}
		if c.ID != "ch_new_final" {
			age(t, conn, "charges", c.ID)
		}
	}
	for id, status := range map[string]payrouter.RefundStatus{
		"re_old_succeeded": payrouter.RefundSucceeded, "re_old_failed": payrouter.RefundFailed,
		"re_old_queued": payrouter.RefundQueued, "re_old_pending": payrouter.RefundPending,
		"re_new_succeeded": payrouter.RefundSucceeded,
	} {
		rf := &payrouter.Refund{ID: id, ChargeID: "ch_old_final", Amount: 1, Currency: "USD", Status: status}
		if err := s.ChangeRefund(ctx, payrouter.RefundChange{Refund: rf}); err != nil {
			t.Fatal(err)
		}
		if id != "re_new_succeeded" {
			age(t, conn, "refunds", id)
		}
	}

	want := map[string][]string{
		`SELECT key FROM idempotency_keys`: {"k-held", "k-live"},
		`SELECT id FROM charges`:           {"ch_new_final", "ch_old_processing"},
		`SELECT id FROM refunds`:           {"re_new_succeeded", "re_old_pending", "re_old_queued"},
	}
	deadline := time.Now().Add(5 * time.Second)
	for query, kept := range want {
		for {
			got := ids(t, conn, query)
			if slices.Equal(got, kept) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s = %v 5 s after the sweep started; want %v", query, got, kept)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Closed, the store sweeps no more.
	s.Close()
	if err := s.SaveCharge(ctx, testCharge("ch_after_close", payrouter.StatusSucceeded)); err == nil {
		t.Fatal("SaveCharge after Close succeeded")
	}
	if _, err := conn.Exec(ctx, `INSERT INTO charges (id, status, charge, created_at, updated_at)
		VALUES ('ch_late', 'succeeded', '{"id":"ch_late"}', now(), now() - interval '2 hours')`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if got := ids(t, conn, `SELECT id FROM charges WHERE id = 'ch_late'`); len(got) != 1 {
		t.Fatal("a closed store's sweep still deletes")
	}
}

// TestRetentionDefaults: zero Options mean the documented defaults, and negative ones turn the
// sweep, or the deletion of charges, off.
func TestRetentionDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.Timeout != DefaultTimeout || o.Retention.Charges != DefaultChargeRetention ||
		o.Retention.Every != DefaultSweepEvery || o.Retention.Batch != DefaultSweepBatch || o.Log == nil {
		t.Fatalf("zero Options = %+v; want the documented defaults", o)
	}
	off := Options{Retention: Retention{Charges: -1, Every: -1}}.withDefaults()
	if off.Retention.Charges >= 0 || off.Retention.Every >= 0 {
		t.Fatalf("negative retention became %+v; want it kept off", off.Retention)
	}
}
