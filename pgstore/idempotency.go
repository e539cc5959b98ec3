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

// claimSQL takes a key in one statement: a new key is inserted, and a key whose row counts as
// gone (expired) or whose hold ran out before it completed is taken over, in both cases with a
// new token from the one sequence. ON CONFLICT DO UPDATE locks the existing row and evaluates
// its WHERE on the row's latest version, even one committed after this statement's snapshot, so
// of any number of concurrent claims exactly one takes the key; the others update nothing.
//
// When nothing was taken, the second half reads the row as this statement's snapshot saw it,
// which tells the caller why: in flight, or completed (the record to replay). A row committed
// after the snapshot (the key inserted by a concurrent claim a moment ago) is not in it, and a
// row seen expired or released was taken by someone else meanwhile; the caller then asks again,
// with a fresh snapshot.
const claimSQL = `
WITH claimed AS (
	INSERT INTO idempotency_keys AS k (key, fingerprint, token, held_until, expires_at)
	VALUES ($1, $2, nextval('idempotency_tokens'),
		now() + $3::bigint * interval '1 microsecond',
		now() + 2 * $3::bigint * interval '1 microsecond')
	ON CONFLICT (key) DO UPDATE SET
		fingerprint = excluded.fingerprint, token = excluded.token,
		held_until = excluded.held_until, expires_at = excluded.expires_at,
		status = NULL, header = NULL, body = NULL, created_at = NULL
	WHERE k.expires_at <= now() OR (k.status IS NULL AND k.held_until <= now())
	RETURNING k.token
)
SELECT true, token, NULL::text, NULL::integer, NULL::jsonb, NULL::bytea, NULL::timestamptz, true, true
FROM claimed
UNION ALL
SELECT false, k.token, k.fingerprint, k.status, k.header, k.body, k.created_at,
	k.expires_at > now(), k.status IS NULL AND k.held_until > now()
FROM idempotency_keys k
WHERE k.key = $1 AND NOT EXISTS (SELECT 1 FROM claimed)`

// claimTries bounds how often Claim asks again when the key changed under it. Each change is
// another request claiming, completing or releasing the same key within milliseconds; after a
// few of those the key is as good as in flight.
const claimTries = 4

// Claim takes key for a request with that fingerprint, held for holdFor
// (payrouter.IdempotencyStore): a new Hold when the key is new, or its hold ran out before it
// completed, or its record expired; a copy of the stored record when it completed with the same
// fingerprint; payrouter.ErrMismatch when it completed with another; payrouter.ErrInFlight while
// it is held, whatever the fingerprint (the holder may yet release it, and then the other body
// is a legitimate first request). owner is not used: PostgreSQL's disk is the operator's to size
// (docs/limits.md), and no key's rows are refused for another's.
func (s *Store) Claim(ctx context.Context, _, key, fingerprint string, holdFor time.Duration) (*payrouter.IdempotencyRecord, payrouter.Hold, error) {
	if key == "" {
		return nil, payrouter.Hold{}, errors.New("pgstore: claim: empty key")
	}
	if holdFor <= 0 {
		return nil, payrouter.Hold{}, fmt.Errorf("pgstore: claim %q: hold must be positive, not %v", key, holdFor)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for range claimTries {
		var (
			claimed, live, held bool
			token               int64
			fp                  *string
			status              *int32
			header, body        []byte
			created             *time.Time
		)
		err := s.pool.QueryRow(ctx, claimSQL, key, fingerprint, micros(holdFor)).
			Scan(&claimed, &token, &fp, &status, &header, &body, &created, &live, &held)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			continue // inserted by a concurrent claim after this statement's snapshot
		case err != nil:
			return nil, payrouter.Hold{}, s.fail(fmt.Sprintf("claim %q", key), err)
		case claimed:
			return nil, payrouter.Hold{Key: key, Token: token}, nil
		case status != nil && live:
			if *fp != fingerprint {
				return nil, payrouter.Hold{}, payrouter.ErrMismatch
			}
			rec, err := record(*fp, *status, header, body, created)
			if err != nil {
				return nil, payrouter.Hold{}, fmt.Errorf("pgstore: claim %q: %w", key, err)
			}
			return rec, payrouter.Hold{}, nil
		case held:
			return nil, payrouter.Hold{}, payrouter.ErrInFlight
		}
		// Seen expired or with its hold run out, yet not taken: another claim took it since.
	}
	return nil, payrouter.Hold{}, payrouter.ErrInFlight
}

// peekSQL reads a key's row as Claim would judge it, and writes nothing.
const peekSQL = `
SELECT fingerprint, status, header, body, created_at, expires_at > now(), status IS NULL AND held_until > now()
FROM idempotency_keys WHERE key = $1`

// Peek tells what Claim would, without claiming and without writing (payrouter.IdempotencyStore):
// one read, so that a request refused anyway (every breaker open) costs the database no write.
func (s *Store) Peek(ctx context.Context, key, fingerprint string) (*payrouter.IdempotencyRecord, error) {
	if key == "" {
		return nil, errors.New("pgstore: peek: empty key")
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var (
		fp           string
		status       *int32
		header, body []byte
		created      *time.Time
		live, held   bool
	)
	err := s.pool.QueryRow(ctx, peekSQL, key).Scan(&fp, &status, &header, &body, &created, &live, &held)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, s.fail(fmt.Sprintf("peek %q", key), err)
	case !live:
		return nil, nil
	case held:
		return nil, payrouter.ErrInFlight
	case status == nil:
		return nil, nil // its hold ran out: free for the next claim
	case fp != fingerprint:
		return nil, payrouter.ErrMismatch
	}
	rec, err := record(fp, *status, header, body, created)
	if err != nil {
		return nil, fmt.Errorf("pgstore: peek %q: %w", key, err)
	}
	return rec, nil
}

// record builds the stored answer from its columns.
func record(fingerprint string, status int32, header, body []byte, created *time.Time) (*payrouter.IdempotencyRecord, error) {
	rec := &payrouter.IdempotencyRecord{Fingerprint: fingerprint, Status: int(status), Body: body}
	if created != nil {
		rec.CreatedAt = *created
	}
	if len(header) > 0 {
		if err := json.Unmarshal(header, &rec.Header); err != nil {
			return nil, fmt.Errorf("decoding the stored header: %w", err)
		}
	}
	return rec, nil
}

// renewSQL extends a hold that is still the key's latest claim and not completed. A hold that
// ran out while nobody took the key may be renewed: it is still the only claim.
const renewSQL = `
UPDATE idempotency_keys
SET held_until = now() + $3::bigint * interval '1 microsecond',
	expires_at = now() + 2 * $3::bigint * interval '1 microsecond'
WHERE key = $1 AND token = $2 AND status IS NULL AND expires_at > now()`

// Renew extends h by holdFor from now (payrouter.IdempotencyStore); payrouter.ErrHoldLost when
// a later claim took the key, or it completed, or it expired.
func (s *Store) Renew(ctx context.Context, h payrouter.Hold, holdFor time.Duration) error {
	if holdFor <= 0 {
		return fmt.Errorf("pgstore: renew %q: hold must be positive, not %v", h.Key, holdFor)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, renewSQL, h.Key, h.Token, micros(holdFor))
	if err != nil {
		return s.fail(fmt.Sprintf("renew %q", h.Key), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: renew %q: %w", h.Key, payrouter.ErrHoldLost)
	}
	return nil
}

// completeSQL stores the answer on the key's row while the row still carries the hold's token
// and has not expired. UPDATE locks the row, so a concurrent claim either took the key before
// (the token no longer matches on the row's latest version, and nothing is written) or waits
// until this statement's transaction commits. A record already stored is left as it was (the
// first complete answer is the one replayed), and the update still returns the row: the
// caller's hold is good.
var completeSQL = completeUpdate("true")

// completeUpdate is completeSQL's update, done only when cond (SQL) holds too.
func completeUpdate(cond string) string {
	return `
UPDATE idempotency_keys k SET
	fingerprint = CASE WHEN k.status IS NULL THEN $3 ELSE k.fingerprint END,
	header = CASE WHEN k.status IS NULL THEN $5::jsonb ELSE k.header END,
	body = CASE WHEN k.status IS NULL THEN $6::bytea ELSE k.body END,
	created_at = CASE WHEN k.status IS NULL THEN coalesce($7::timestamptz, now()) ELSE k.created_at END,
	expires_at = CASE WHEN k.status IS NULL THEN now() + $8::bigint * interval '1 microsecond' ELSE k.expires_at END,
	held_until = NULL,
	status = coalesce(k.status, $4::integer)
WHERE k.key = $1 AND k.token = $2 AND k.expires_at > now() AND (` + cond + `)
RETURNING 1`
}

// completeArgs are completeSQL's arguments $1-$8.
func completeArgs(h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) ([]any, error) {
	var header any // NULL: none; else JSON as text, which every pgx protocol sends as such
	if len(rec.Header) > 0 {
		b, err := json.Marshal(rec.Header)
		if err != nil {
			return nil, fmt.Errorf("encoding the header: %w", err)
		}
		header = string(b)
	}
	var created any // NULL: now()
	if !rec.CreatedAt.IsZero() {
		created = rec.CreatedAt
	}
	return []any{h.Key, h.Token, rec.Fingerprint, int32(rec.Status), header, rec.Body, created, micros(ttl)}, nil
}

// checkComplete refuses what no store can complete: the caller's bug, not the key's state.
func checkComplete(h payrouter.Hold, ttl time.Duration) error {
	switch {
	case h.Key == "":
		return errors.New("empty key")
	case !h.Held():
		return fmt.Errorf("key %q: no hold", h.Key)
	case ttl <= 0:
		return fmt.Errorf("key %q: ttl must be positive, not %v", h.Key, ttl)
	}
	return nil
}

// Complete stores rec as the answer for h's key, kept for ttl; a zero rec.CreatedAt is set to
// the database's now (payrouter.IdempotencyStore). The record is stored even when the hold ran
// out while nobody took the key: once a gateway was asked, the answer is what keeps a retry
// from charging again. payrouter.ErrHoldLost when a later claim took the key. A record already
// stored is kept, and Complete returns nil.
func (s *Store) Complete(ctx context.Context, h payrouter.Hold, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	if err := checkComplete(h, ttl); err != nil {
		return fmt.Errorf("pgstore: complete: %w", err)
	}
	args, err := completeArgs(h, rec, ttl)
	if err != nil {
		return fmt.Errorf("pgstore: complete %q: %w", h.Key, err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tag, err := s.pool.Exec(ctx, completeSQL, args...)
	if err != nil {
		return s.fail(fmt.Sprintf("complete %q", h.Key), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: complete %q: %w", h.Key, payrouter.ErrHoldLost)
	}
	return nil
}

// releaseSQL forgets a key still held by the hold's token and not completed (or completed and
// expired, which counts as gone). A completed record is kept: a Release deferred by a handler
// that completed must not erase the stored answer; so is a key a later claim took.
const releaseSQL = `
DELETE FROM idempotency_keys
WHERE key = $1 AND token = $2 AND (status IS NULL OR expires_at <= now())`

// Release forgets the key held by h, whose answer is not stored, so that the same key may be
// sent again (payrouter.IdempotencyStore); nothing when h lost the key or it completed.
func (s *Store) Release(ctx context.Context, h payrouter.Hold) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, releaseSQL, h.Key, h.Token); err != nil {
		return s.fail(fmt.Sprintf("release %q", h.Key), err)
	}
	return nil
}

// micros is d in whole microseconds, PostgreSQL's resolution, and at least one, so that a
// positive duration never becomes a hold that has already run out.
func micros(d time.Duration) int64 {
	return max(1, d.Microseconds())
}
