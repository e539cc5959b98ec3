package pgstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter"
)

// changeRefundSQL writes a refund change (payrouter.RefundChange) in one statement, so in one
// transaction. The charge's row is locked first, at the version its writer read ($6 the charge's
// id, NULL when the change leaves it; $9 that version; its next form $8 must keep the refunds
// within it, refundsFit), then the refund's; FOR UPDATE re-reads a
// row changed since this statement's snapshot, so each precondition is checked on the latest
// committed state: the charge still at $9, the refund in status $5 (” for a new refund: none
// with its id). Then the refund ($1-$4), the charge ($7, $8), the task ($10, $11) and the events
// ($12, $13; owner $14) are written, each only once the one before it was: all or nothing.
var changeRefundSQL = `
WITH lc AS (
	SELECT 1 FROM charges WHERE id = $6::text AND version = $9::bigint AND ` + refundsFit("$8::jsonb", "charge") + ` FOR UPDATE
), lr AS (
	SELECT status FROM refunds WHERE id = $1::text AND (SELECT count(*) FROM lc) >= 0 FOR UPDATE
), ok AS (
	SELECT ($6::text IS NULL OR EXISTS (SELECT 1 FROM lc)) AND CASE
		WHEN $5::text = '' THEN NOT EXISTS (SELECT 1 FROM lr)
		ELSE EXISTS (SELECT 1 FROM lr WHERE status = $5::text) END AS ok
), rf AS (
	INSERT INTO refunds AS r (id, charge_id, status, refund)
	SELECT $1::text, $2::text, $3::text, $4::jsonb WHERE (SELECT ok FROM ok)
	ON CONFLICT (id) DO UPDATE SET status = excluded.status, refund = excluded.refund, updated_at = now()
	WHERE r.status = $5::text
	RETURNING 1
), ch AS (
	UPDATE charges SET status = $7::text, charge = $8::jsonb, version = $9::bigint + 1, updated_at = now()
	WHERE id = $6::text AND version = $9::bigint AND EXISTS (SELECT 1 FROM rf)
	RETURNING 1
), task AS (
	INSERT INTO tasks (task, not_before)
	SELECT $10::jsonb, $11::timestamptz WHERE $10::jsonb IS NOT NULL AND EXISTS (SELECT 1 FROM rf)
	RETURNING id
), events AS (` + insertEvents(12, "$14::text", "$2::text", "$8::jsonb", "$4::jsonb", "EXISTS (SELECT 1 FROM rf)") + `
)
SELECT EXISTS (SELECT 1 FROM rf) AND ($6::text IS NULL OR EXISTS (SELECT 1 FROM ch)), (SELECT id FROM task)`

// ChangeRefund writes ch in one statement (payrouter.RefundStore): the refund from ch.From, its
// charge at the version it was read at, the task, and the events of both moves; or nothing, and
// payrouter.ErrStale.
func (s *Store) ChangeRefund(ctx context.Context, ch payrouter.RefundChange) error {
	r := ch.Refund
	if r == nil || r.ID == "" {
		return errors.New("pgstore: change refund: no refund id")
	}
	what := fmt.Sprintf("change refund %s from %q to %s", r.ID, ch.From, r.Status)
	doc, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("pgstore: %s: encoding: %w", what, err)
	}
	types := payrouter.RefundEvents(ch.From, r.Status)
	var chargeID, status, chargeDoc any // NULL: the change leaves the charge as it is
	var version int64
	if c := ch.Charge; c != nil {
		args, err := chargeArgs(what, c)
		if err != nil {
			return err
		}
		chargeID, status, chargeDoc, version = args[0], args[1], args[2], c.Stored.Version
		types = append(types, payrouter.ChargeEvents(c.Stored, c)...)
	}
	var task, notBefore any // NULL: no task
	if ch.Task != nil {
		b, err := json.Marshal(ch.Task)
		if err != nil {
			return fmt.Errorf("pgstore: %s: encoding its task: %w", what, err)
		}
		task = string(b)
		if !ch.Task.NotBefore.IsZero() {
			notBefore = ch.Task.NotBefore
		}
	}
	ids, names := eventArgs(types)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var done bool
	var taskID *int64
	err = s.pool.QueryRow(ctx, changeRefundSQL, r.ID, r.ChargeID, string(r.Status), string(doc), string(ch.From),
		chargeID, status, chargeDoc, version, task, notBefore, ids, names, r.Owner).Scan(&done, &taskID)
	switch {
	case err != nil:
		return s.failChange(what, err)
	case !done:
		return stale(what)
	}
	if ch.Charge != nil {
		written(ch.Charge)
	}
	if ch.Task != nil && taskID != nil {
		ch.Task.ID = strconv.FormatInt(*taskID, 10)
	}
	return nil
}

// Refund returns the refund with that id, or an error wrapping payrouter.ErrNotFound.
func (s *Store) Refund(ctx context.Context, id string) (*payrouter.Refund, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var doc []byte
	err := s.pool.QueryRow(ctx, `SELECT refund FROM refunds WHERE id = $1`, id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: refund %q: %w", id, payrouter.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("refund %q", id), err)
	}
	return decodeRefund(id, doc)
}

func decodeRefund(id string, doc []byte) (*payrouter.Refund, error) {
	var r payrouter.Refund
	if err := json.Unmarshal(doc, &r); err != nil {
		return nil, fmt.Errorf("pgstore: refund %q: decoding: %w", id, err)
	}
	return &r, nil
}

// Enqueue adds a task and returns its id, the decimal form of its row's bigserial
// (payrouter.Queue). The task is kept whole as JSON; its NotBefore is a column too, for ops.
func (s *Store) Enqueue(ctx context.Context, t payrouter.Task) (string, error) {
	doc, err := json.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("pgstore: enqueue %s task of charge %s: encoding: %w", t.Kind, t.ChargeID, err)
	}
	var notBefore any // NULL: at once
	if !t.NotBefore.IsZero() {
		notBefore = t.NotBefore
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var id int64
	err = s.pool.QueryRow(ctx, `INSERT INTO tasks (task, not_before) VALUES ($1, $2) RETURNING id`, string(doc), notBefore).Scan(&id)
	if err != nil {
		return "", s.fail(fmt.Sprintf("enqueue %s task of charge %s", t.Kind, t.ChargeID), err)
	}
	return strconv.FormatInt(id, 10), nil
}

// takeSQL hands out up to $3 tasks to consumer $1: those handed out more than $2 microseconds
// ago and not acknowledged first, then those never handed out, each in the order they were
// queued. FOR UPDATE SKIP LOCKED lets consumers take at once without waiting for each other or
// getting the same task: a row another Take has locked is skipped, and a row another Take
// handed out since this statement's snapshot is re-read under the lock and no longer matches.
//
// A task whose not_before has not come is passed over (the database's clock decides, as for
// idle): a webhook delivery waiting hours for its next attempt is not handed out meanwhile.
const takeSQL = `
WITH picked AS (
	SELECT id, taken_at IS NOT NULL AS again
	FROM tasks
	WHERE (taken_at IS NULL OR taken_at <= now() - $2::bigint * interval '1 microsecond')
		AND (not_before IS NULL OR not_before <= now())
	ORDER BY taken_at IS NULL, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
UPDATE tasks t SET taken_by = $1, taken_at = now(), deliveries = t.deliveries + 1
FROM picked
WHERE t.id = picked.id
RETURNING t.id, t.task, t.deliveries, picked.again`

// Take hands consumer up to limit tasks whose NotBefore has come (payrouter.Queue): first those
// handed out before, to anyone, and not acknowledged for idle or longer (a consumer that crashed, or left them for
// later), then new ones, each in the order queued. Each task's Deliveries counts this time too.
func (s *Store) Take(ctx context.Context, consumer string, limit int, idle time.Duration) ([]payrouter.Task, error) {
	if limit <= 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, takeSQL, consumer, max(0, idle.Microseconds()), limit)
	if err != nil {
		return nil, s.fail("take tasks for "+consumer, err)
	}
	type taken struct {
		task  payrouter.Task
		id    int64
		again bool
	}
	var got []taken
	var (
		id         int64
		doc        []byte
		deliveries int32
		again      bool
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &doc, &deliveries, &again}, func() error {
		var t payrouter.Task
		if err := json.Unmarshal(doc, &t); err != nil {
			return fmt.Errorf("task %d: decoding: %w", id, err)
		}
		t.ID, t.Deliveries = strconv.FormatInt(id, 10), int(deliveries)
		got = append(got, taken{task: t, id: id, again: again})
		return nil
	})
	if err != nil {
		return nil, s.fail("take tasks for "+consumer, err)
	}
	// UPDATE ... RETURNING keeps no order: put it back.
	slices.SortFunc(got, func(a, b taken) int {
		if a.again != b.again {
			if a.again {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.id, b.id)
	})
	tasks := make([]payrouter.Task, len(got))
	for i, t := range got {
		tasks[i] = t.task
	}
	return tasks, nil
}

// Ack removes the task with that id; an unknown id, or one no Enqueue could have given, is no
// error: the task was acknowledged already, or never was this queue's.
func (s *Store) Ack(ctx context.Context, id string) error {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, `DELETE FROM tasks WHERE id = $1`, n); err != nil {
		return s.fail("ack task "+id, err)
	}
	return nil
}

// QueueDepth counts the tasks not acknowledged yet, handed out or not.
func (s *Store) QueueDepth(ctx context.Context) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM tasks`).Scan(&n); err != nil {
		return 0, s.fail("queue depth", err)
	}
	return n, nil
}
