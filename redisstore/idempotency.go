package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/payrouter/payrouter"
)

// An idempotency key is one Redis string, key("idem", key), expiring with Redis's own PX expiry:
// while claimed it holds idemInFlight and expires after the claim's inFlightTTL; once completed it
// holds the record's JSON and expires after the record's ttl. One key per idempotency key, so
// every script below touches a single key and runs on any Cluster slot.

// idemInFlight is the value of a claimed key whose answer is not stored yet. A completed key holds
// a JSON object, which starts with '{', so the two cannot be confused. The fingerprint is not
// kept with a claim: a key in flight answers ErrInFlight whatever the fingerprint.
const idemInFlight = "in-flight"

// Each operation is one script, so that reading the key and acting on what it holds is atomic
// across every instance (two instances can never both take a key) and costs one round trip
// (EVALSHA; go-redis falls back to EVAL once after a Redis restart has emptied its script cache).
var (
	// idemClaimScript returns the key's value when it has one, or takes the key and returns nil.
	// KEYS[1]: the key; ARGV[1]: idemInFlight; ARGV[2]: the in-flight TTL in ms.
	idemClaimScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
`)

	// idemCompleteScript stores the record unless one is stored already (first complete wins),
	// whether or not the key is still claimed; it returns 1 when it stored it.
	// KEYS[1]: the key; ARGV[1]: the record's JSON; ARGV[2]: its TTL in ms; ARGV[3]: idemInFlight.
	idemCompleteScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

	// idemReleaseScript deletes the key only while it is claimed, never a stored record.
	// KEYS[1]: the key; ARGV[1]: idemInFlight.
	idemReleaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
)

// Claim takes key for a request with that fingerprint, atomically across every instance sharing
// the Redis. It returns (nil, nil) when the key is new (or its earlier claim or record expired)
// and now held by the caller for inFlightTTL; the stored record when the key completed with the
// same fingerprint; payrouter.ErrMismatch when it completed with another one;
// payrouter.ErrInFlight while it is held, whatever the fingerprint (memstore.Store.Claim says
// why). One round trip.
func (s *Store) Claim(ctx context.Context, key, fingerprint string, inFlightTTL time.Duration) (*payrouter.IdempotencyRecord, error) {
	if key == "" {
		return nil, errors.New("redisstore: claim: empty key")
	}
	if inFlightTTL <= 0 {
		return nil, errors.New("redisstore: claim: in-flight ttl must be positive")
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := idemClaimScript.Run(ctx, s.rdb, []string{s.key("idem", key)}, idemInFlight, pxMillis(inFlightTTL)).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("redisstore: claim idempotency key: %w", err)
	case v == idemInFlight:
		return nil, payrouter.ErrInFlight
	}
	var rec payrouter.IdempotencyRecord
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return nil, fmt.Errorf("redisstore: claim idempotency key: decoding the stored record: %w", err)
	}
	if rec.Fingerprint != fingerprint {
		return nil, payrouter.ErrMismatch
	}
	return &rec, nil
}

// Complete stores rec as the answer for key, kept for ttl; a zero rec.CreatedAt is set to now.
// It stores it even when the claim has expired or was never made, because once a gateway was
// asked the answer is what keeps a retry from charging again; a record already stored is kept,
// since the first complete answer is the one replayed. One round trip.
func (s *Store) Complete(ctx context.Context, key string, rec payrouter.IdempotencyRecord, ttl time.Duration) error {
	b, err := encodeRecord(key, rec, ttl)
	if err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := idemCompleteScript.Run(ctx, s.rdb, []string{s.key("idem", key)}, b, pxMillis(ttl), idemInFlight).Err(); err != nil {
		return fmt.Errorf("redisstore: complete idempotency key: %w", err)
	}
	return nil
}

// encodeRecord checks a Complete's arguments and returns the record's stored form, with a zero
// CreatedAt set to now.
func encodeRecord(key string, rec payrouter.IdempotencyRecord, ttl time.Duration) ([]byte, error) {
	if key == "" {
		return nil, errors.New("redisstore: complete: empty key")
	}
	if ttl <= 0 {
		return nil, errors.New("redisstore: complete: ttl must be positive")
	}
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = time.Now()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("redisstore: complete: encoding the record: %w", err)
	}
	return b, nil
}

// Release forgets a claimed key so that the same key may be sent again. A completed record is
// kept: a Release deferred by a handler that completed must not erase the stored answer. One
// round trip.
func (s *Store) Release(ctx context.Context, key string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := idemReleaseScript.Run(ctx, s.rdb, []string{s.key("idem", key)}, idemInFlight).Err(); err != nil {
		return fmt.Errorf("redisstore: release idempotency key: %w", err)
	}
	return nil
}

// pxMillis is d in whole milliseconds for PX, rounded up: rounding down would turn a
// sub-millisecond TTL into 0, which Redis refuses, and a TTL must never end early.
func pxMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
