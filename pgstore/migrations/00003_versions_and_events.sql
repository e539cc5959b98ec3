-- Every change of a charge is a transition from the version its writer read (payrouter.Stored):
-- a write is conditional on the version it replaces, so a charge changed meanwhile by another
-- request, instance, the reconciler or the queue worker is never overwritten with what was
-- computed from an older read. Charges stored before this start at version 1.
--
-- The events: one row for each change of a charge or refund, written in the same statement as
-- the change (docs/api.md, GET /events). Their order is (txid, seq): txid is the writing
-- transaction's id, and a reader lists only events whose transaction is older than every
-- transaction still running (pg_snapshot_xmin of its snapshot), so that an event committed late
-- by a slower instance can never land before a position a reader has already paged past. xid8
-- and pg_current_xact_id are PostgreSQL 13 or later.

-- +goose Up
ALTER TABLE charges ADD COLUMN version bigint NOT NULL DEFAULT 1;

CREATE TABLE events (
    id         text PRIMARY KEY,
    seq        bigserial NOT NULL,
    txid       xid8 NOT NULL DEFAULT pg_current_xact_id(),
    owner      text NOT NULL,
    type       text NOT NULL,
    -- the charge the event is of (a refund's charge for refund events): retention deletes the
    -- events with their charge's age
    charge_id  text NOT NULL,
    -- the charge's or the refund's JSON form as it was written (payrouter.Charge, Refund)
    object     jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_owner_order ON events (owner, txid, seq);
CREATE INDEX events_created ON events (created_at);

-- +goose Down
DROP TABLE events;
ALTER TABLE charges DROP COLUMN version;
