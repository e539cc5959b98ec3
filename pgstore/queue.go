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

// SaveRefund creates or replaces the refund with r.ID (payrouter.RefundStore).
func (s *Store) SaveRefund(ctx context.Context, r *payrouter.Refund) error {
	if r == nil {
		return errors.New("pgstore: save refund: nil refund")
	}
	if r.ID == "" {
		return errors.New("pgstore: save refund: empty refund id")
	}
	doc, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("pgstore: save refund %s: encoding: %w", r.ID, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	_, err = s.pool.Exec(ctx, `
INSERT INTO refunds (id, charge_id, status, refund) VALUES ($1, $2, $3, $4)
ON CONFLICT (id) DO UPDATE SET
	charge_id = excluded.charge_id, status = excluded.status, refund = excluded.refund,
	updated_at = now()`, r.ID, r.ChargeID, string(r.Status), string(doc))
	if err != nil {
		return s.fail("save refund "+r.ID, err)
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
// NotBefore is not a condition here, as in every store (memstore, redisstore): the worker
// looks at it and leaves a task that is not due in the queue, to come back after idle.
const takeSQL = `
WITH picked AS (
	SELECT id, taken_at IS NOT NULL AS again
	FROM tasks
	WHERE taken_at IS NULL OR taken_at <= now() - $2::bigint * interval '1 microsecond'
	ORDER BY taken_at IS NULL, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
)
UPDATE tasks t SET taken_by = $1, taken_at = now(), deliveries = t.deliveries + 1
FROM picked
WHERE t.id = picked.id
RETURNING t.id, t.task, t.deliveries, picked.again`

// Take hands consumer up to limit tasks (payrouter.Queue): first those handed out before, to
// anyone, and not acknowledged for idle or longer (a consumer that crashed, or left them for
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
