package pgstore

import (
	"context"
	"time"

	"github.com/payrouter/payrouter"
)

// sweepTimeout bounds one delete statement of the retention sweep: longer than a request's
// Timeout, since nobody waits on it, yet bounded, so that a sweep never hangs on a database that
// stopped answering.
const sweepTimeout = 30 * time.Second

// sweepRounds bounds the batches one sweep deletes from each table: a backlog (the sweep was
// off, or the fleet was down) is worked off over a few sweeps, never in one long run.
const sweepRounds = 100

// The sweep's statements delete one batch each ($1 rows at most). FOR UPDATE SKIP LOCKED skips
// a row a request is writing (a key being taken over, a charge being saved), and re-reads under
// the lock a row changed since the snapshot, so a key claimed anew a moment ago is not deleted;
// instances sweeping at once share the work instead of waiting for each other.
const (
	sweepKeysSQL = `
DELETE FROM idempotency_keys WHERE key IN (
	SELECT key FROM idempotency_keys WHERE expires_at <= now()
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	sweepChargesSQL = `
DELETE FROM charges WHERE id IN (
	SELECT id FROM charges
	WHERE status <> $2 AND updated_at < now() - $3::bigint * interval '1 microsecond'
	ORDER BY updated_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	// Events are kept as long as charges are: those older than the retention go, whatever
	// their charge's state (an event is history, never a promise).
	sweepEventsSQL = `
DELETE FROM events WHERE id IN (
	SELECT id FROM events WHERE created_at < now() - $2::bigint * interval '1 microsecond'
	ORDER BY created_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	// Dead letters are kept as long as charges are, then go.
	sweepDeadLettersSQL = `
DELETE FROM webhook_dead_letters WHERE delivery IN (
	SELECT delivery FROM webhook_dead_letters WHERE dead_at < now() - $2::bigint * interval '1 microsecond'
	ORDER BY dead_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
	sweepRefundsSQL = `
DELETE FROM refunds WHERE id IN (
	SELECT id FROM refunds
	WHERE status IN ($2, $3) AND updated_at < now() - $4::bigint * interval '1 microsecond'
	ORDER BY updated_at LIMIT $1 FOR UPDATE SKIP LOCKED)`
)

// sweepEvery runs the retention sweep every Retention.Every until ctx ends (Close).
func (s *Store) sweepEvery(ctx context.Context) {
	tick := time.NewTicker(s.opts.Retention.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.sweep(ctx)
	}
}

// sweep deletes what Retention says is no longer kept and logs what it did. A failure is
// logged and left for the next sweep: nothing waits on it, and what it would delete counts as
// gone already (an expired key) or harms nobody by staying a little longer.
func (s *Store) sweep(ctx context.Context) {
	r := s.opts.Retention
	failed := func(table string, err error) {
		if ctx.Err() == nil { // not Close stopping the sweep
			s.opts.Log.WarnContext(ctx, "pgstore.retention_failed", "table", table, "error", err.Error())
		}
	}
	keys, err := s.sweepTable(ctx, sweepKeysSQL)
	if err != nil {
		failed("idempotency_keys", err)
		return
	}
	var charges, refunds, events, dead int64
	if r.Charges > 0 {
		keep := micros(r.Charges)
		if charges, err = s.sweepTable(ctx, sweepChargesSQL, string(payrouter.StatusProcessing), keep); err != nil {
			failed("charges", err)
			return
		}
		final := []any{string(payrouter.RefundSucceeded), string(payrouter.RefundFailed), keep}
		if refunds, err = s.sweepTable(ctx, sweepRefundsSQL, final...); err != nil {
			failed("refunds", err)
			return
		}
		if events, err = s.sweepTable(ctx, sweepEventsSQL, keep); err != nil {
			failed("events", err)
			return
		}
		if dead, err = s.sweepTable(ctx, sweepDeadLettersSQL, keep); err != nil {
			failed("webhook_dead_letters", err)
			return
		}
	}
	if keys+charges+refunds+events+dead > 0 {
		s.opts.Log.InfoContext(ctx, "pgstore.retention", "idempotency_keys", keys, "charges", charges, "refunds", refunds, "events", events,
			"webhook_dead_letters", dead)
	}
}

// sweepTable runs one of the sweep's statements, batch after batch, until a batch deletes less
// than a full one or sweepRounds ran, and returns how many rows it deleted.
func (s *Store) sweepTable(ctx context.Context, sql string, args ...any) (int64, error) {
	batch := s.opts.Retention.Batch
	args = append([]any{batch}, args...)
	var total int64
	for range sweepRounds {
		n, err := s.sweepBatch(ctx, sql, args)
		total += n
		if err != nil || n < int64(batch) {
			return total, err
		}
	}
	return total, nil
}

func (s *Store) sweepBatch(ctx context.Context, sql string, args []any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, sweepTimeout)
	defer cancel()
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return 0, s.fail("retention sweep", err)
	}
	return tag.RowsAffected(), nil
}
