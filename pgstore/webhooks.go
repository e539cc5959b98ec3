package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter"
)

// What the storefront webhooks keep (payrouter.WebhookStore; migration 00004). A cursor's
// position is "<txid>:<seq>", the order the event feed is listed in (events.go).

// cursorSQL reads an endpoint's cursor; newCursorSQL puts a new one at the horizon of the
// feed: every event of a transaction older than the oldest still running is before it, every
// other is after it (a position (xmin, 0) precedes every event of transaction xmin and later).
const (
	cursorSQL    = `SELECT txid::text, seq FROM webhook_cursors WHERE endpoint = $1`
	newCursorSQL = `
INSERT INTO webhook_cursors (endpoint, txid, seq) VALUES ($1, pg_snapshot_xmin(pg_current_snapshot()), 0)
ON CONFLICT (endpoint) DO NOTHING`
)

// advanceSQL moves a cursor and queues the deliveries in one statement: the UPDATE locks the
// cursor's row and, under READ COMMITTED, re-checks its condition on the latest committed
// version, so of two instances dispatching the same page at once the second finds the cursor
// moved, updates nothing, and queues nothing.
const advanceSQL = `
WITH moved AS (
	UPDATE webhook_cursors SET txid = $4::text::xid8, seq = $5::bigint, updated_at = now()
	WHERE endpoint = $1 AND txid = $2::text::xid8 AND seq = $3::bigint
	RETURNING 1
), queued AS (
	INSERT INTO tasks (task, not_before)
	SELECT t, NULL FROM unnest($6::text[]::jsonb[]) AS t WHERE EXISTS (SELECT 1 FROM moved)
	RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM moved), (SELECT count(*) FROM queued)`

// requeueSQL and deadLetterSQL take a task out of the queue and put it back, or among the dead
// letters, in one statement: the DELETE of a row another instance deleted first deletes
// nothing, and then nothing is written.
const (
	requeueSQL = `
WITH gone AS (DELETE FROM tasks WHERE id = $1 RETURNING 1)
INSERT INTO tasks (task, not_before)
SELECT $2::jsonb, $3::timestamptz WHERE EXISTS (SELECT 1 FROM gone)
RETURNING id`
	deadLetterSQL = `
WITH gone AS (DELETE FROM tasks WHERE id = $1 RETURNING 1)
INSERT INTO webhook_dead_letters (delivery, endpoint, task, reason, dead_at)
SELECT $2, $3, $4::jsonb, $5, $6 WHERE EXISTS (SELECT 1 FROM gone)
ON CONFLICT (delivery) DO UPDATE SET endpoint = excluded.endpoint, task = excluded.task,
	reason = excluded.reason, dead_at = excluded.dead_at
RETURNING 1`
	redeliverSQL = `
WITH gone AS (DELETE FROM webhook_dead_letters WHERE delivery = $1 RETURNING 1)
INSERT INTO tasks (task, not_before)
SELECT $2::jsonb, $3::timestamptz WHERE EXISTS (SELECT 1 FROM gone)
RETURNING id`
)

func parsePosition(p string) (txid string, seq int64, err error) {
	t, n, ok := strings.Cut(p, ":")
	if ok {
		_, err = strconv.ParseUint(t, 10, 64)
		if err == nil {
			seq, err = strconv.ParseInt(n, 10, 64)
		}
	}
	if !ok || err != nil {
		return "", 0, fmt.Errorf("pgstore: %q is not a position of the event feed", p)
	}
	return t, seq, nil
}

func position(txid string, seq int64) string { return txid + ":" + strconv.FormatInt(seq, 10) }

// WebhookEvents returns up to limit of owner's events after endpoint's cursor, in the feed's
// order and with its guarantee (eventsSQL); an endpoint without a cursor gets one first, at the
// feed's horizon (payrouter.WebhookStore).
func (s *Store) WebhookEvents(ctx context.Context, endpoint, owner string, limit int) (payrouter.EventPage, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	what := "webhook events of " + endpoint
	var txid string
	var seq int64
	err := s.pool.QueryRow(ctx, cursorSQL, endpoint).Scan(&txid, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err = s.pool.Exec(ctx, newCursorSQL, endpoint); err == nil {
			err = s.pool.QueryRow(ctx, cursorSQL, endpoint).Scan(&txid, &seq)
		}
	}
	if err != nil {
		return payrouter.EventPage{}, s.fail(what, err)
	}
	page := payrouter.EventPage{From: position(txid, seq), To: position(txid, seq)}
	if limit <= 0 {
		return page, nil
	}
	rows, err := s.pool.Query(ctx, eventsSQL, owner, txid, seq, limit+1)
	if err != nil {
		return payrouter.EventPage{}, s.fail(what, err)
	}
	var (
		id, typ, pos string
		created      time.Time
		doc          []byte
		n            int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &typ, &created, &doc, &pos, &n}, func() error {
		if len(page.Events) == limit {
			page.More = true
			return nil
		}
		ev, err := decodeEvent(id, typ, owner, created, doc)
		if err != nil {
			return err
		}
		page.Events = append(page.Events, ev)
		page.To = position(pos, n)
		return nil
	})
	if err != nil {
		return payrouter.EventPage{}, s.fail(what, err)
	}
	return page, nil
}

// decodeEvent builds an event from its row.
func decodeEvent(id, typ, owner string, created time.Time, doc []byte) (payrouter.Event, error) {
	ev := payrouter.Event{ID: id, Type: payrouter.EventType(typ), Owner: owner, CreatedAt: created}
	if ev.Type.OfRefund() {
		r, err := decodeRefund(id, doc)
		if err != nil {
			return ev, err
		}
		ev.Refund = r
		return ev, nil
	}
	c, err := decodeCharge(id, doc, 0)
	if err != nil {
		return ev, err
	}
	ev.Charge = c
	return ev, nil
}

// AdvanceWebhook moves endpoint's cursor from from to to and queues tasks, in one statement
// (advanceSQL): payrouter.ErrStale when another instance moved it first.
func (s *Store) AdvanceWebhook(ctx context.Context, endpoint, from, to string, tasks []payrouter.Task) error {
	what := fmt.Sprintf("advance webhook cursor of %s to %s", endpoint, to)
	fromTx, fromSeq, err := parsePosition(from)
	if err != nil {
		return err
	}
	toTx, toSeq, err := parsePosition(to)
	if err != nil {
		return err
	}
	docs := make([]string, len(tasks))
	for i, t := range tasks {
		b, err := json.Marshal(t)
		if err != nil {
			return fmt.Errorf("pgstore: %s: encoding a task: %w", what, err)
		}
		docs[i] = string(b)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var moved bool
	var queued int64
	if err := s.pool.QueryRow(ctx, advanceSQL, endpoint, fromTx, fromSeq, toTx, toSeq, docs).Scan(&moved, &queued); err != nil {
		return s.failChange(what, err)
	}
	if !moved {
		return stale(what + ": the cursor is no longer at " + from)
	}
	return nil
}

// encodeTask is a task's row: its JSON and its not_before (NULL: at once).
func encodeTask(what string, t payrouter.Task) (string, any, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return "", nil, fmt.Errorf("pgstore: %s: encoding: %w", what, err)
	}
	var notBefore any
	if !t.NotBefore.IsZero() {
		notBefore = t.NotBefore
	}
	return string(b), notBefore, nil
}

// taskID parses an id Enqueue gave; ok is false for one it could not have given.
func taskID(id string) (int64, bool) {
	n, err := strconv.ParseInt(id, 10, 64)
	return n, err == nil
}

// RequeueTask replaces the queued task id by t in one statement (payrouter.WebhookStore).
func (s *Store) RequeueTask(ctx context.Context, id string, t *payrouter.Task) error {
	what := "requeue task " + id
	n, ok := taskID(id)
	if !ok {
		return fmt.Errorf("pgstore: %s: %w", what, payrouter.ErrNotFound)
	}
	doc, notBefore, err := encodeTask(what, *t)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var newID int64
	err = s.pool.QueryRow(ctx, requeueSQL, n, doc, notBefore).Scan(&newID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgstore: %s: not queued: %w", what, payrouter.ErrNotFound)
	case err != nil:
		return s.fail(what, err)
	}
	t.ID = strconv.FormatInt(newID, 10)
	return nil
}

// DeadLetterTask moves the queued task id among the dead letters in one statement
// (payrouter.WebhookStore).
func (s *Store) DeadLetterTask(ctx context.Context, id string, dl payrouter.DeadLetter) error {
	what := "dead-letter task " + id
	n, ok := taskID(id)
	if !ok {
		return fmt.Errorf("pgstore: %s: %w", what, payrouter.ErrNotFound)
	}
	w := dl.Task.Webhook
	if w == nil {
		return fmt.Errorf("pgstore: %s: no webhook delivery", what)
	}
	dl.Task.ID = ""
	doc, _, err := encodeTask(what, dl.Task)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var one int
	err = s.pool.QueryRow(ctx, deadLetterSQL, n, w.ID, w.Endpoint, doc, dl.Reason, dl.At).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgstore: %s: not queued: %w", what, payrouter.ErrNotFound)
	case err != nil:
		return s.fail(what, err)
	}
	return nil
}

// DeadLetters returns up to limit dead letters, the newest first (payrouter.WebhookStore).
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]payrouter.DeadLetter, error) {
	if limit <= 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT task, reason, dead_at FROM webhook_dead_letters ORDER BY dead_at DESC, delivery LIMIT $1`, limit)
	if err != nil {
		return nil, s.fail("dead letters", err)
	}
	var (
		out    []payrouter.DeadLetter
		doc    []byte
		reason string
		at     time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&doc, &reason, &at}, func() error {
		dl := payrouter.DeadLetter{Reason: reason, At: at}
		if err := json.Unmarshal(doc, &dl.Task); err != nil {
			return fmt.Errorf("decoding a dead letter: %w", err)
		}
		out = append(out, dl)
		return nil
	})
	if err != nil {
		return nil, s.fail("dead letters", err)
	}
	return out, nil
}

// DeadLetterOf returns the dead letter of delivery, or payrouter.ErrNotFound.
func (s *Store) DeadLetterOf(ctx context.Context, delivery string) (*payrouter.DeadLetter, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	dl := payrouter.DeadLetter{}
	var doc []byte
	err := s.pool.QueryRow(ctx, `SELECT task, reason, dead_at FROM webhook_dead_letters WHERE delivery = $1`, delivery).Scan(&doc, &dl.Reason, &dl.At)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("pgstore: dead letter %q: %w", delivery, payrouter.ErrNotFound)
	case err != nil:
		return nil, s.fail(fmt.Sprintf("dead letter %q", delivery), err)
	}
	if err := json.Unmarshal(doc, &dl.Task); err != nil {
		return nil, fmt.Errorf("pgstore: dead letter %q: decoding: %w", delivery, err)
	}
	return &dl, nil
}

// Redeliver removes the dead letter of delivery and queues t, in one statement
// (payrouter.WebhookStore).
func (s *Store) Redeliver(ctx context.Context, delivery string, t *payrouter.Task) error {
	what := fmt.Sprintf("redeliver %q", delivery)
	doc, notBefore, err := encodeTask(what, *t)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var id int64
	err = s.pool.QueryRow(ctx, redeliverSQL, delivery, doc, notBefore).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgstore: %s: no such dead letter: %w", what, payrouter.ErrNotFound)
	case err != nil:
		return s.fail(what, err)
	}
	t.ID = strconv.FormatInt(id, 10)
	return nil
}

// WebhookBacklog counts the webhook deliveries queued and the dead letters.
func (s *Store) WebhookBacklog(ctx context.Context) (queued, dead int64, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM tasks WHERE task->>'kind' = $1), (SELECT count(*) FROM webhook_dead_letters)`,
		string(payrouter.TaskWebhook)).Scan(&queued, &dead)
	if err != nil {
		return 0, 0, s.fail("webhook backlog", err)
	}
	return queued, dead, nil
}

// SetWebhookDisabled disables endpoint, or enables it again with nil (payrouter.WebhookStore).
func (s *Store) SetWebhookDisabled(ctx context.Context, endpoint string, d *payrouter.WebhookDisabled) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var err error
	if d == nil {
		_, err = s.pool.Exec(ctx, `DELETE FROM webhook_endpoints_disabled WHERE endpoint = $1`, endpoint)
	} else {
		_, err = s.pool.Exec(ctx, `
INSERT INTO webhook_endpoints_disabled (endpoint, url, reason, disabled_at) VALUES ($1, $2, $3, $4)
ON CONFLICT (endpoint) DO UPDATE SET url = excluded.url, reason = excluded.reason, disabled_at = excluded.disabled_at`,
			endpoint, d.URL, d.Reason, d.At)
	}
	if err != nil {
		return s.fail("set webhook endpoint "+endpoint, err)
	}
	return nil
}

// WebhooksDisabled returns the disabled endpoints (payrouter.WebhookStore).
func (s *Store) WebhooksDisabled(ctx context.Context) (map[string]payrouter.WebhookDisabled, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT endpoint, url, reason, disabled_at FROM webhook_endpoints_disabled`)
	if err != nil {
		return nil, s.fail("disabled webhook endpoints", err)
	}
	out := map[string]payrouter.WebhookDisabled{}
	var name string
	var d payrouter.WebhookDisabled
	_, err = pgx.ForEachRow(rows, []any{&name, &d.URL, &d.Reason, &d.At}, func() error {
		out[name] = d
		return nil
	})
	if err != nil {
		return nil, s.fail("disabled webhook endpoints", err)
	}
	return out, nil
}
