-- The storefront webhooks (docs/webhooks.md). Deliveries are tasks of the queue (kind webhook);
-- these tables hold the rest:
--
-- webhook_cursors: each endpoint's position in the event feed, in the order events are listed
-- (txid, seq: 00003). A dispatcher moves it from the position it read to the last event it
-- dispatched in the same statement that queues the deliveries, conditional on the position it
-- read, so a page of events is dispatched once however many instances read it at once.
--
-- webhook_dead_letters: deliveries given up (the last attempt failed, a 410, an endpoint no
-- longer configured), one per delivery id, until redelivered or past the charges' retention.
--
-- webhook_endpoints_disabled: endpoints that answered 410 Gone, with the URL that did.

-- +goose Up
CREATE TABLE webhook_cursors (
    endpoint   text PRIMARY KEY,
    txid       xid8 NOT NULL,
    seq        bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_dead_letters (
    delivery text PRIMARY KEY,
    endpoint text NOT NULL,
    -- the delivery's task as it was when given up (payrouter.Task with its webhook)
    task     jsonb NOT NULL,
    reason   text NOT NULL,
    dead_at  timestamptz NOT NULL
);
CREATE INDEX webhook_dead_letters_dead_at ON webhook_dead_letters (dead_at);

CREATE TABLE webhook_endpoints_disabled (
    endpoint    text PRIMARY KEY,
    url         text NOT NULL,
    reason      text NOT NULL,
    disabled_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE webhook_endpoints_disabled;
DROP TABLE webhook_dead_letters;
DROP TABLE webhook_cursors;
