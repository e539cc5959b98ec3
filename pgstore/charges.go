package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter"
)

// upsertCharge returns the write of a charge, the heart of every statement that saves one: its
// id, status, JSON form, CreatedAt and the version it was read at are the parameters from
// $first on. It is a transition: a new charge (read at version 0) is inserted only when no charge
// has its id, and a stored one is replaced only while the row is still at the version its writer
// read. ON CONFLICT DO UPDATE locks the row and evaluates its WHERE on the row's latest version,
// even one committed after this statement's snapshot, so of two writers that read the same
// version exactly one writes. It is done only when cond (SQL) holds too, and returns a row when
// it wrote.
func upsertCharge(first int, cond string) string {
	return fmt.Sprintf(`
	INSERT INTO charges AS c (id, status, charge, created_at, version)
	SELECT $%[1]d::text, $%[2]d::text, $%[3]d::jsonb, $%[4]d::timestamptz, $%[5]d::bigint + 1
	WHERE (%[6]s) AND ($%[5]d::bigint = 0 OR EXISTS (SELECT 1 FROM charges WHERE id = $%[1]d::text))
		AND %[8]s
	ON CONFLICT (id) DO UPDATE SET
		status = excluded.status, charge = excluded.charge,
		created_at = excluded.created_at, updated_at = now(), version = excluded.version
	WHERE c.version = $%[5]d::bigint AND %[7]s
	RETURNING 1`, first, first+1, first+2, first+3, first+4, cond, refundsFit("excluded.charge", "c.charge"),
		refundsFit(fmt.Sprintf("$%d::jsonb", first+2), "'{}'::jsonb"))
}

// refundsFit is the money rule a charge's write must keep, in SQL (payrouter.Charge.Fits): the
// refunds of next (a charge's JSON form), applied and reserved, fit what it captured, or grow no
// further than those of was, the charge as stored. The store refuses the write otherwise,
// whatever computed it.
func refundsFit(next, was string) string {
	sum := func(doc string) string {
		return fmt.Sprintf("(coalesce((%[1]s->>'refunded')::bigint, 0) + coalesce((%[1]s->>'refunds_reserved')::bigint, 0))", doc)
	}
	return fmt.Sprintf("(coalesce((%[1]s->>'refunded')::bigint, 0) >= 0 AND coalesce((%[1]s->>'refunds_reserved')::bigint, 0) >= 0 AND (%[2]s <= (%[1]s->>'amount')::bigint OR %[2]s <= %[3]s))",
		next, sum(next), sum(was))
}

// insertEvents returns the write of a change's events: ids and types are the text arrays $ids
// and $ids+1, their objects the JSON forms chargeDoc and refundDoc (SQL expressions), by type;
// each belongs to owner and the charge chargeID. It writes only when cond holds.
func insertEvents(ids int, owner, chargeID, chargeDoc, refundDoc, cond string) string {
	return fmt.Sprintf(`
	INSERT INTO events (id, owner, type, charge_id, object)
	SELECT e.id, %[3]s, e.type, %[4]s,
		CASE WHEN e.type LIKE 'refund.%%' THEN %[6]s ELSE %[5]s END
	FROM unnest($%[1]d::text[], $%[2]d::text[]) AS e(id, type)
	WHERE %[7]s`, ids, ids+1, owner, chargeID, chargeDoc, refundDoc, cond)
}

// saveChargeSQL writes a charge ($1-$5) with its events ($8, $9; owner $6), fenced when the hold's
// token ($7, with its key $10) is not 0: only while the key's row carries that token and has not
// expired. FOR SHARE locks that row against the update a concurrent Claim makes to take the key
// over: a claim that committed first changed the token on the row's latest version, which the
// lock re-reads, and nothing is written; a claim that comes after waits until this write has
// committed. It answers whether the charge was written, and whether the hold was good.
var saveChargeSQL = `
WITH hold AS (
	SELECT 1 FROM idempotency_keys
	WHERE $7::bigint <> 0 AND key = $10::text AND token = $7::bigint AND expires_at > now()
	FOR SHARE
), fenced AS (
	SELECT $7::bigint = 0 OR EXISTS (SELECT 1 FROM hold) AS ok
), saved AS (` + upsertCharge(1, "SELECT ok FROM fenced") + `
), events AS (` + insertEvents(8, "$6::text", "$1::text", "$3::jsonb", "NULL::jsonb", "EXISTS (SELECT 1 FROM saved)") + `
)
SELECT EXISTS (SELECT 1 FROM saved), (SELECT ok FROM fenced)`

// completeChargeSQL is completeSQL ($1-$8) and the charge's write ($9-$13, owner $14, events $15
// and $16) in one statement, so in one transaction, each done only with the other: the key's row
// is locked first (FOR UPDATE, fencing off a concurrent claim as in saveChargeSQL), the charge
// written only while the hold is good, and the key completed only when the charge was written.
var completeChargeSQL = `
WITH hold AS (
	SELECT 1 FROM idempotency_keys WHERE key = $1 AND token = $2 AND expires_at > now() FOR UPDATE
), saved AS (` + upsertCharge(9, "EXISTS (SELECT 1 FROM hold)") + `
), done AS (` + completeUpdate("EXISTS (SELECT 1 FROM saved)") + `
), events AS (` + insertEvents(15, "$14::text", "$9::text", "$11::jsonb", "NULL::jsonb", "EXISTS (SELECT 1 FROM saved)") + `
)
SELECT EXISTS (SELECT 1 FROM done), EXISTS (SELECT 1 FROM hold)`

// chargeArgs checks c and returns the arguments of its write: its JSON form, which leaves out
// the payment method and the hold (payrouter.Charge), so the token is never stored; the version
// it was read at; its owner.
func chargeArgs(what string, c *payrouter.Charge) ([]any, error) {
	if c == nil {
		return nil, fmt.Errorf("pgstore: %s: nil charge", what)
	}
	if c.ID == "" {
		return nil, fmt.Errorf("pgstore: %s: empty charge id", what)
	}
	doc, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s %s: encoding: %w", what, c.ID, err)
	}
	// The document goes as text: []byte is bytea to pgx's simple and exec protocols (a pooler's).
	return []any{c.ID, string(c.Status), string(doc), c.CreatedAt, c.Stored.Version, c.Owner}, nil
}

// eventArgs are the ids and types of the events of types, new ids for each.
func eventArgs(types []payrouter.EventType) (ids, names []string) {
	ids, names = make([]string, len(types)), make([]string, len(types))
	for i, t := range types {
		ids[i], names[i] = payrouter.NewEventID(), string(t)
	}
	return ids, names
}

// written records on c that the store now holds it at the version after the one it was read at.
func written(c *payrouter.Charge) {
	c.Stored = payrouter.Stored{Version: c.Stored.Version + 1, Status: c.Status, Refunded: c.Refunded}
}

// stale is the error of a transition that found its charge or refund changed.
func stale(what string) error {
	return fmt.Errorf("pgstore: %s: %w", what, payrouter.ErrStale)
}

// SaveCharge writes c as the next version of its charge, without its payment method, with the
// events of its change (payrouter.ChargeStore): payrouter.ErrStale when the stored charge is no
// longer at c.Stored.Version; when c.Hold is held, payrouter.ErrHoldLost, and nothing written,
// unless c.Hold is still its key's latest claim (completed or not).
func (s *Store) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	args, err := chargeArgs("save charge", c)
	if err != nil {
		return err
	}
	ids, types := eventArgs(payrouter.ChargeEvents(c.Stored, c))
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var saved, fenced bool
	err = s.pool.QueryRow(ctx, saveChargeSQL, append(args, c.Hold.Token, ids, types, c.Hold.Key)...).Scan(&saved, &fenced)
	switch {
	case err != nil:
		return s.failChange("save charge "+c.ID, err)
	case !fenced:
		return fmt.Errorf("pgstore: save charge %s under key %q: %w", c.ID, c.Hold.Key, payrouter.ErrHoldLost)
	case !saved:
		return stale(fmt.Sprintf("save charge %s at version %d", c.ID, c.Stored.Version))
	}
	written(c)
	return nil
}

// CompleteCharge saves c and completes h's key with rec, kept for ttl, in one statement, both
// fenced by h (payrouter.Store): both are stored, or neither; payrouter.ErrHoldLost when a later
// claim took the key, payrouter.ErrStale when the charge changed since c.Stored. When the key had
// completed already its record is kept, and c is still saved: h is still the key's claim.
func (s *Store) CompleteCharge(ctx context.Context, c *payrouter.Charge, h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	charge, err := chargeArgs("complete charge", c)
	if err != nil {
		return err
	}
	if err := checkComplete(h, ttl); err != nil {
		return fmt.Errorf("pgstore: complete charge %s: %w", c.ID, err)
	}
	args, err := completeArgs(h, rec, ttl)
	if err != nil {
		return fmt.Errorf("pgstore: complete charge %s: %w", c.ID, err)
	}
	ids, types := eventArgs(payrouter.ChargeEvents(c.Stored, c))
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var done, held bool
	args = append(append(args, charge...), ids, types)
	if err := s.pool.QueryRow(ctx, completeChargeSQL, args...).Scan(&done, &held); err != nil {
		return s.failChange(fmt.Sprintf("complete charge %s under key %q", c.ID, h.Key), err)
	}
	switch {
	case !held:
		return fmt.Errorf("pgstore: complete charge %s under key %q: %w", c.ID, h.Key, payrouter.ErrHoldLost)
	case !done:
		return stale(fmt.Sprintf("complete charge %s at version %d", c.ID, c.Stored.Version))
	}
	written(c)
	return nil
}

// Charge returns the charge with that id, or an error wrapping payrouter.ErrNotFound.
func (s *Store) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var doc []byte
	var version int64
	err := s.pool.QueryRow(ctx, `SELECT charge, version FROM charges WHERE id = $1`, id).Scan(&doc, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: charge %q: %w", id, payrouter.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("charge %q", id), err)
	}
	return decodeCharge(id, doc, version)
}

// ChargesByStatus returns up to limit charges in that status, oldest first by CreatedAt, ties
// broken by id; a limit of zero or less returns none.
func (s *Store) ChargesByStatus(ctx context.Context, status payrouter.ChargeStatus, limit int) ([]*payrouter.Charge, error) {
	if limit <= 0 {
		return nil, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.pool.Query(ctx,
		`SELECT id, charge, version FROM charges WHERE status = $1 ORDER BY created_at, id LIMIT $2`, string(status), limit)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("charges in status %s", status), err)
	}
	var out []*payrouter.Charge
	var id string
	var doc []byte
	var version int64
	_, err = pgx.ForEachRow(rows, []any{&id, &doc, &version}, func() error {
		c, err := decodeCharge(id, doc, version)
		if err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, s.fail(fmt.Sprintf("charges in status %s", status), err)
	}
	return out, nil
}

// decodeCharge decodes a charge stored at version (0: an event's copy, no version).
func decodeCharge(id string, doc []byte, version int64) (*payrouter.Charge, error) {
	var c payrouter.Charge
	if err := json.Unmarshal(doc, &c); err != nil {
		return nil, fmt.Errorf("pgstore: charge %q: decoding: %w", id, err)
	}
	if version > 0 {
		c.Stored = payrouter.Stored{Version: version, Status: c.Status, Refunded: c.Refunded}
	}
	return &c, nil
}
