-- The money state (docs/architecture.md, State stores): charges, refunds, idempotency keys and the
-- durable task queue. Every time that decides anything (a hold running out, a record expiring, a
-- task idle long enough) is the database's now(), never an instance's clock, so that a fleet whose
-- clocks disagree still agrees on who holds a key.

-- +goose Up

-- Charges are kept as their JSON form (payrouter.Charge), which leaves out the payment token and
-- the request's hold. The columns beside it are what queries select and order by.
CREATE TABLE charges (
    id         text PRIMARY KEY,
    status     text NOT NULL,
    charge     jsonb NOT NULL,
    -- the charge's own CreatedAt: ChargesByStatus lists oldest first, ties by id
    created_at timestamptz NOT NULL,
    -- when the row was last written (the database's clock): retention reads it
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- The reconciler asks for the few processing charges among many final ones, oldest first.
CREATE INDEX charges_status_created ON charges (status, created_at, id);
CREATE INDEX charges_updated ON charges (updated_at);

CREATE TABLE refunds (
    id         text PRIMARY KEY,
    charge_id  text NOT NULL,
    status     text NOT NULL,
    refund     jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX refunds_updated ON refunds (updated_at);

-- Fencing tokens come from one sequence for every key: a token is never handed out twice, not to
-- another key, not to a key whose row was deleted and claimed anew.
CREATE SEQUENCE idempotency_tokens AS bigint;

-- One row per idempotency key: in flight while status is NULL (held until held_until by the
-- claim whose fencing token is token), completed once status is set (the stored answer). Either
-- way the row counts as gone from expires_at on: a completed record after its ttl, an in-flight
-- claim one hold after its hold ran out (a slow holder may still complete until then), and the
-- retention sweep deletes it.
CREATE TABLE idempotency_keys (
    key         text PRIMARY KEY,
    fingerprint text NOT NULL,
    token       bigint NOT NULL,
    held_until  timestamptz,
    expires_at  timestamptz NOT NULL,
    status      integer,
    header      jsonb,
    body        bytea,
    created_at  timestamptz
);
CREATE INDEX idempotency_keys_expires ON idempotency_keys (expires_at);

-- The durable task queue. A task is handed out by setting taken_at (FOR UPDATE SKIP LOCKED, so
-- consumers never wait for each other) and stays until acknowledged (deleted).
CREATE TABLE tasks (
    id         bigserial PRIMARY KEY,
    task       jsonb NOT NULL,
    not_before timestamptz,
    taken_by   text,
    taken_at   timestamptz,
    deliveries integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE tasks;
DROP TABLE idempotency_keys;
DROP SEQUENCE idempotency_tokens;
DROP TABLE refunds;
DROP TABLE charges;
