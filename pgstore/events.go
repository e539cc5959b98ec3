package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter"
)

// eventsSQL lists an owner's events after a position, in the order (txid, seq): the writing
// transaction's id, then the row's sequence within the server. Sequence numbers are drawn when a
// row is inserted, not when its transaction commits, so two instances committing out of order
// would let a reader page past an event that becomes visible a moment later. Only events whose
// transaction is older than the oldest still running (pg_snapshot_xmin of this statement's
// snapshot) are listed: every one of those has committed (or never will), and every event not
// yet visible belongs to a transaction at or past that horizon, so it sorts after everything
// listed. A reader may wait for the few milliseconds a write takes; it never misses one.
const eventsSQL = `
SELECT e.id, e.type, e.created_at, e.object, e.txid::text, e.seq
FROM events e
WHERE e.owner = $1 AND (e.txid, e.seq) > ($2::text::xid8, $3::bigint)
	AND e.txid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.txid, e.seq
LIMIT $4`

// eventAtSQL finds the position of an owner's event.
const eventAtSQL = `SELECT txid::text, seq FROM events WHERE id = $1 AND owner = $2`

// Events returns up to limit of owner's events after the one with id after, oldest first
// (payrouter.EventStore): payrouter.ErrNotFound when after names no event of owner's.
func (s *Store) Events(ctx context.Context, owner, after string, limit int) ([]payrouter.Event, bool, error) {
	if limit <= 0 {
		return nil, false, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	txid, seq := "0", int64(0)
	if after != "" {
		err := s.pool.QueryRow(ctx, eventAtSQL, after, owner).Scan(&txid, &seq)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, fmt.Errorf("pgstore: event %q: %w", after, payrouter.ErrNotFound)
		}
		if err != nil {
			return nil, false, s.fail(fmt.Sprintf("event %q", after), err)
		}
	}
	rows, err := s.pool.Query(ctx, eventsSQL, owner, txid, seq, limit+1)
	if err != nil {
		return nil, false, s.fail("events", err)
	}
	var (
		out          []payrouter.Event
		id, typ, pos string
		created      time.Time
		doc          []byte
		n            int64
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &typ, &created, &doc, &pos, &n}, func() error {
		ev := payrouter.Event{ID: id, Type: payrouter.EventType(typ), Owner: owner, CreatedAt: created}
		if ev.Type.OfRefund() {
			r, err := decodeRefund(id, doc)
			if err != nil {
				return err
			}
			ev.Refund = r
		} else {
			c, err := decodeCharge(id, doc, 0)
			if err != nil {
				return err
			}
			ev.Charge = c
		}
		out = append(out, ev)
		return nil
	})
	if err != nil {
		return nil, false, s.fail("events", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}
