package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrouter/payrouter"
)

// claimChargeSQL claims a key ($1, fingerprint $2, hold $3 in microseconds) as claimSQL does and,
// only when the claim was won, inserts the charge ($4 id, $5 status, $6 JSON form, $7
// CreatedAt; owner $8, events $9 and $10) as its first version, in one statement, so in one
// transaction and one round trip: a new charge's only write before its gateway call.
//
// What the statement's snapshot shows of the key (was) decides whether a claim is tried at all:
// a key live and completed (a replay) or live and held (in flight) is answered from the
// snapshot, with no insert attempted, so no row is locked and nothing is written (a read-only
// transaction: no WAL, no commit to flush). A key absent, expired, or whose hold ran out is
// claimed as claimSQL claims it: ON CONFLICT DO UPDATE evaluates its WHERE on the row's latest
// version, so of concurrent claims exactly one wins. A key changed after the snapshot (claimed,
// completed or released a moment ago) makes the statement claim nothing and read nothing it can
// use, and the caller asks again.
//
// The charge is inserted with ON CONFLICT DO NOTHING: a charge already under its id (written by
// an earlier holder of the key, whose instance stopped mid-charge) is kept as it is and returned
// from the snapshot for the caller to settle. One written after the snapshot (by a holder fenced
// off since, whose write committed while this statement waited for its lock on the key) is
// neither inserted nor read: the caller reads it.
var claimChargeSQL = `
WITH was AS (
	SELECT fingerprint, status, header, body, created_at, expires_at > now() AS live,
		status IS NULL AND held_until > now() AS held
	FROM idempotency_keys WHERE key = $1
), claimed AS (
	INSERT INTO idempotency_keys AS k (key, fingerprint, token, held_until, expires_at)
	SELECT $1, $2, nextval('idempotency_tokens'),
		now() + $3::bigint * interval '1 microsecond',
		now() + 2 * $3::bigint * interval '1 microsecond'
	WHERE NOT EXISTS (SELECT 1 FROM was WHERE live AND (status IS NOT NULL OR held))
	ON CONFLICT (key) DO UPDATE SET
		fingerprint = excluded.fingerprint, token = excluded.token,
		held_until = excluded.held_until, expires_at = excluded.expires_at,
		status = NULL, header = NULL, body = NULL, created_at = NULL
	WHERE k.expires_at <= now() OR (k.status IS NULL AND k.held_until <= now())
	RETURNING k.token
), saved AS (
	INSERT INTO charges (id, status, charge, created_at, version)
	SELECT $4::text, $5::text, $6::jsonb, $7::timestamptz, 1
	WHERE EXISTS (SELECT 1 FROM claimed)
	ON CONFLICT (id) DO NOTHING
	RETURNING 1
), events AS (` + insertEvents(9, "$8::text", "$4::text", "$6::jsonb", "NULL::jsonb", "EXISTS (SELECT 1 FROM saved)") + `
)
SELECT true, c.token, EXISTS (SELECT 1 FROM saved), p.charge, p.version,
	NULL::text, NULL::integer, NULL::jsonb, NULL::bytea, NULL::timestamptz, true, true
FROM claimed c LEFT JOIN charges p ON p.id = $4::text
UNION ALL
SELECT false, 0, false, NULL::jsonb, NULL::bigint,
	w.fingerprint, w.status, w.header, w.body, w.created_at, w.live, w.held
FROM was w WHERE NOT EXISTS (SELECT 1 FROM claimed)`

// ClaimCharge claims key as Claim does and, when the claim is won, stores c as its charge's
// first version in the same statement (payrouter.Store): one round trip and one commit before a
// new charge's gateway call, where Claim and SaveCharge took two. A replay of a completed key
// and a key in flight write nothing. owner is not used (Claim).
func (s *Store) ClaimCharge(ctx context.Context, _, key, fingerprint string, holdFor time.Duration, c *payrouter.Charge) (payrouter.Claimed, error) {
	switch {
	case key == "":
		return payrouter.Claimed{}, errors.New("pgstore: claim charge: empty key")
	case holdFor <= 0:
		return payrouter.Claimed{}, fmt.Errorf("pgstore: claim %q: hold must be positive, not %v", key, holdFor)
	}
	charge, err := chargeArgs("claim charge", c)
	if err != nil {
		return payrouter.Claimed{}, err
	}
	if c.Stored.Version != 0 {
		return payrouter.Claimed{}, fmt.Errorf("pgstore: claim charge %s: not a new charge (version %d)", c.ID, c.Stored.Version)
	}
	ids, types := eventArgs(payrouter.ChargeEvents(c.Stored, c))
	args := []any{key, fingerprint, micros(holdFor), charge[0], charge[1], charge[2], charge[3], charge[5], ids, types}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for range claimTries {
		var (
			claimed, saved, live, held bool
			token                      int64
			prevDoc                    []byte
			prevVersion                *int64
			fp                         *string
			status                     *int32
			header, body               []byte
			created                    *time.Time
		)
		err := s.pool.QueryRow(ctx, claimChargeSQL, args...).
			Scan(&claimed, &token, &saved, &prevDoc, &prevVersion, &fp, &status, &header, &body, &created, &live, &held)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // inserted by a concurrent claim after this statement's snapshot
		case err != nil:
			return payrouter.Claimed{}, s.fail(fmt.Sprintf("claim charge %s under key %q", c.ID, key), err)
		case claimed:
			h := payrouter.Hold{Key: key, Token: token}
			c.Hold = h
			if saved {
				written(c)
				return payrouter.Claimed{Hold: h, Stored: true}, nil
			}
			got := payrouter.Claimed{Hold: h}
			if prevVersion != nil {
				// One that does not decode is left to the caller's read, which says why.
				got.Prev, _ = decodeCharge(c.ID, prevDoc, *prevVersion)
			}
			return got, nil
		case status != nil && live:
			if *fp != fingerprint {
				return payrouter.Claimed{}, payrouter.ErrMismatch
			}
			rec, err := record(*fp, *status, header, body, created)
			if err != nil {
				return payrouter.Claimed{}, fmt.Errorf("pgstore: claim %q: %w", key, err)
			}
			return payrouter.Claimed{Record: rec}, nil
		case held:
			return payrouter.Claimed{}, payrouter.ErrInFlight
		}
		// Seen expired or with its hold run out, yet not taken: another claim took it since.
	}
	return payrouter.Claimed{}, payrouter.ErrInFlight
}
