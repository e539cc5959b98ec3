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

// upsertCharge returns the write of a charge, the tail of every statement that saves one: its
// id, status, JSON form and CreatedAt are the parameters from $first on, and it is done only
// when cond (SQL, or "" for always) holds.
func upsertCharge(first int, cond string) string {
	if cond != "" {
		cond = "WHERE " + cond
	}
	return fmt.Sprintf(`
INSERT INTO charges (id, status, charge, created_at)
SELECT $%d::text, $%d::text, $%d::jsonb, $%d::timestamptz %s
ON CONFLICT (id) DO UPDATE SET
	status = excluded.status, charge = excluded.charge,
	created_at = excluded.created_at, updated_at = now()`, first, first+1, first+2, first+3, cond)
}

// saveChargeSQL writes a charge unfenced.
var saveChargeSQL = upsertCharge(1, "")

// saveFencedChargeSQL writes a charge ($1-$4) only while the key's row ($5) carries the hold's
// token ($6) and has not expired, in one statement. FOR SHARE locks that row against the update
// a concurrent Claim makes to take the key over: a claim that committed first changed the token
// on the row's latest version, which the lock re-reads, and nothing is written; a claim that
// comes after waits until this write has committed. The rows written tell the two apart.
var saveFencedChargeSQL = `
WITH hold AS (
	SELECT 1 FROM idempotency_keys
	WHERE key = $5 AND token = $6 AND expires_at > now()
	FOR SHARE
)` + upsertCharge(1, "EXISTS (SELECT 1 FROM hold)")

// completeChargeSQL is completeSQL ($1-$8) and the charge's write ($9-$12) in one statement,
// so in one transaction: the charge is written only when the key's row was updated, and that
// row's lock, taken by the UPDATE, fences off a concurrent claim as in saveFencedChargeSQL.
var completeChargeSQL = `
WITH done AS (` + completeSQL + `
), saved AS (` + upsertCharge(9, "EXISTS (SELECT 1 FROM done)") + `
)
SELECT count(*) FROM done`

// chargeArgs checks c and returns the arguments of its write: its JSON form, which leaves out
// the payment method and the hold (payrouter.Charge), so the token is never stored.
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
	return []any{c.ID, string(c.Status), string(doc), c.CreatedAt}, nil
}

// SaveCharge creates or replaces the charge with c.ID, without its payment method
// (payrouter.ChargeStore). When c.Hold is held the write is fenced: payrouter.ErrHoldLost, and
// nothing written, unless c.Hold is still its key's latest claim (completed or not).
func (s *Store) SaveCharge(ctx context.Context, c *payrouter.Charge) error {
	args, err := chargeArgs("save charge", c)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if !c.Hold.Held() {
		if _, err := s.pool.Exec(ctx, saveChargeSQL, args...); err != nil {
			return s.fail("save charge "+c.ID, err)
		}
		return nil
	}
	tag, err := s.pool.Exec(ctx, saveFencedChargeSQL, append(args, c.Hold.Key, c.Hold.Token)...)
	if err != nil {
		return s.fail("save charge "+c.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: save charge %s under key %q: %w", c.ID, c.Hold.Key, payrouter.ErrHoldLost)
	}
	return nil
}

// CompleteCharge saves c and completes h's key with rec, kept for ttl, in one statement, both
// fenced by h (payrouter.Store): both are stored, or neither, and payrouter.ErrHoldLost when a
// later claim took the key. When the key had completed already its record is kept, and c is
// still saved: h is still the key's claim.
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
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var done int64
	if err := s.pool.QueryRow(ctx, completeChargeSQL, append(args, charge...)...).Scan(&done); err != nil {
		return s.fail(fmt.Sprintf("complete charge %s under key %q", c.ID, h.Key), err)
	}
	if done == 0 {
		return fmt.Errorf("pgstore: complete charge %s under key %q: %w", c.ID, h.Key, payrouter.ErrHoldLost)
	}
	return nil
}

// Charge returns the charge with that id, or an error wrapping payrouter.ErrNotFound.
func (s *Store) Charge(ctx context.Context, id string) (*payrouter.Charge, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var doc []byte
	err := s.pool.QueryRow(ctx, `SELECT charge FROM charges WHERE id = $1`, id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgstore: charge %q: %w", id, payrouter.ErrNotFound)
	}
	if err != nil {
		return nil, s.fail(fmt.Sprintf("charge %q", id), err)
	}
	return decodeCharge(id, doc)
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
		`SELECT id, charge FROM charges WHERE status = $1 ORDER BY created_at, id LIMIT $2`, string(status), limit)
	if err != nil {
		return nil, s.fail(fmt.Sprintf("charges in status %s", status), err)
	}
	var out []*payrouter.Charge
	var id string
	var doc []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &doc}, func() error {
		c, err := decodeCharge(id, doc)
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

func decodeCharge(id string, doc []byte) (*payrouter.Charge, error) {
	var c payrouter.Charge
	if err := json.Unmarshal(doc, &c); err != nil {
		return nil, fmt.Errorf("pgstore: charge %q: decoding: %w", id, err)
	}
	return &c, nil
}
