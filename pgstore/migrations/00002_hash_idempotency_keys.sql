-- Idempotency keys are stored as digests (payrouter.IdempotencyStoreKey): the database never
-- holds the Idempotency-Key a caller sent. This turns the keys stored before, "<scope>:<key>",
-- into the same digest Go computes, 'sha256:' and the hex SHA-256 of those bytes, so that a key
-- claimed before the upgrade and retried after it still finds its claim (409) or its answer
-- (replayed), and is never charged twice. Idempotency-Keys are printable ASCII, so
-- convert_to(key, 'UTF8') is the bytes Go hashed whatever the database's encoding.
-- pgstore's TestMigrationHashesIdempotencyKeys checks that the two agree.
--
-- sha256(bytea) is PostgreSQL 11 or later. Keys already in the new form (none, unless an
-- instance of this version wrote some before this ran, which Open's migration prevents) are
-- left alone.

-- +goose Up
UPDATE idempotency_keys
SET key = 'sha256:' || encode(sha256(convert_to(key, 'UTF8')), 'hex')
WHERE key NOT LIKE 'sha256:%';

-- +goose Down
-- A digest cannot be turned back into the key: going down leaves the digests in place. The
-- previous version then finds none of these keys; the charge ids it derives from a retried key
-- are the same as before (they never used the stored key), so a retry finds its charge rather
-- than making a second one.
SELECT 1;
