package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/pgstore/pgtest"
)

// TestClaimChargeReplayLocksNothing: ClaimCharge of a key completed before (a replay), or held
// (in flight), answers from what it reads and neither writes nor locks a row. A row lock is a
// write in PostgreSQL (its locker's transaction id on the row, WAL, and a commit flushed like
// any other), which claimSQL's ON CONFLICT DO UPDATE takes even when its WHERE refuses the row:
// the row's xmax, the id of the last transaction to lock or delete it, tells.
func TestClaimChargeReplayLocksNothing(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t), suiteOptions)
	ctx := t.Context()
	xmax := func(table, where, arg string) string {
		t.Helper()
		var x string
		if err := s.pool.QueryRow(ctx, `SELECT xmax::text FROM `+table+` WHERE `+where+` = $1`, arg).Scan(&x); err != nil {
			t.Fatalf("xmax of %s %s: %v", table, arg, err)
		}
		return x
	}

	held := testCharge("ch_held", payrouter.StatusProcessing)
	if got, err := s.ClaimCharge(ctx, "", "k-held", fpA, time.Hour, held); err != nil || !got.Stored {
		t.Fatalf("ClaimCharge = %+v, %v; want the charge stored", got, err)
	}
	done := testCharge("ch_done", payrouter.StatusProcessing)
	got, err := s.ClaimCharge(ctx, "", "k-done", fpA, time.Hour, done)
	if err != nil || !got.Stored {
		t.Fatalf("ClaimCharge = %+v, %v; want the charge stored", got, err)
	}
	done.Status = payrouter.StatusSucceeded
	if err := s.CompleteCharge(ctx, done, got.Hold, testRecord(201), time.Hour); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{
		"key k-held": xmax("idempotency_keys", "key", "k-held"), "key k-done": xmax("idempotency_keys", "key", "k-done"),
		"charge ch_held": xmax("charges", "id", "ch_held"), "charge ch_done": xmax("charges", "id", "ch_done"),
	}

	for range 3 {
		if got, err := s.ClaimCharge(ctx, "", "k-done", fpA, time.Hour, testCharge("ch_done", payrouter.StatusProcessing)); err != nil || got.Record == nil {
			t.Fatalf("ClaimCharge of the completed key = %+v, %v; want its record", got, err)
		}
		if _, err := s.ClaimCharge(ctx, "", "k-held", fpA, time.Hour, testCharge("ch_held", payrouter.StatusProcessing)); !errors.Is(err, payrouter.ErrInFlight) {
			t.Fatalf("ClaimCharge of the held key: %v; want ErrInFlight", err)
		}
	}
	after := map[string]string{
		"key k-held": xmax("idempotency_keys", "key", "k-held"), "key k-done": xmax("idempotency_keys", "key", "k-done"),
		"charge ch_held": xmax("charges", "id", "ch_held"), "charge ch_done": xmax("charges", "id", "ch_done"),
	}
	for row, x := range before {
		if after[row] != x {
			t.Errorf("%s: xmax %s before the replays, %s after: a replay locked it", row, x, after[row])
		}
	}
}
