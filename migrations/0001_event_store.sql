-- The event store: an append-only, hash-chained log, and the tables that sit beside it.
-- There is deliberately no rollback file: rolling this back would destroy the audit log.

-- Roles are cluster-wide, so another database on the same server may have made it already,
-- perhaps at this very moment (hence unique_violation as well as duplicate_object).
DO $$
BEGIN
    CREATE ROLE shoebox_app LOGIN;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO shoebox_app', current_database());
END
$$;

GRANT USAGE ON SCHEMA public TO shoebox_app;

CREATE TABLE events (
    position       bigint      PRIMARY KEY CHECK (position >= 1),
    stream_id      text        NOT NULL CHECK (stream_id <> ''),
    category       text        NOT NULL,
    version        integer     NOT NULL CHECK (version >= 1),
    type           text        NOT NULL CHECK (type <> ''),
    schema_version integer     NOT NULL CHECK (schema_version >= 1),
    payload        jsonb       NOT NULL,
    metadata       jsonb       NOT NULL,
    recorded_at    timestamptz NOT NULL,
    prev_hash      char(64)    NOT NULL,
    hash           char(64)    NOT NULL,
    -- Optimistic concurrency's backstop: two appends can never both write a stream's version n.
    UNIQUE (stream_id, version)
);

-- Projections and subscriptions read "everything of this category/type after position p".
CREATE INDEX events_category_position ON events (category, position);
CREATE INDEX events_type_position ON events (type, position);

-- Statement-level, so that even an UPDATE or DELETE that matches no row is refused: the
-- attempt itself is the error, whatever it would have touched.
CREATE FUNCTION events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the events table is append-only: % is not allowed', TG_OP
        USING HINT = 'Events are facts; correct a mistake by appending a compensating event.';
END
$$;

CREATE TRIGGER events_no_update_or_delete
    BEFORE UPDATE OR DELETE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

CREATE TRIGGER events_no_truncate
    BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- Every append calls this first. The exclusive lock makes appends run one at a time, so
-- positions commit in position order: a reader that has seen position p can never later find
-- a position below p committing, and "read after my checkpoint" never skips an event. It also
-- serialises the hash chain, which needs the previous hash anyway. Readers are not blocked:
-- EXCLUSIVE mode does not conflict with SELECT's ACCESS SHARE.
--
-- SECURITY DEFINER because LOCK ... IN EXCLUSIVE MODE needs UPDATE, DELETE or TRUNCATE
-- privilege on the table, which the application role must not have. The head is read after
-- the lock is granted, in a fresh READ COMMITTED snapshot, so it includes the last commit.
CREATE FUNCTION lock_events_for_append(OUT head_position bigint, OUT head_hash text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    LOCK TABLE public.events IN EXCLUSIVE MODE;
    SELECT e.position, e.hash INTO head_position, head_hash
        FROM public.events AS e ORDER BY e.position DESC LIMIT 1;
    head_position := coalesce(head_position, 0);
    head_hash := coalesce(head_hash, repeat('0', 64));
END
$$;

REVOKE ALL ON FUNCTION lock_events_for_append() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lock_events_for_append() TO shoebox_app;

-- An idempotency key is written in the same transaction as the events it produced.
CREATE TABLE idempotency_keys (
    key         text        PRIMARY KEY,
    fingerprint text        NOT NULL,
    result      jsonb       NOT NULL,
    recorded_at timestamptz NOT NULL
);

-- A separate insert-only table, because the response exists only after the append commits
-- and the application role gets no UPDATE anywhere near the log.
CREATE TABLE idempotency_responses (
    key         text        PRIMARY KEY REFERENCES idempotency_keys (key),
    response    jsonb       NOT NULL,
    recorded_at timestamptz NOT NULL
);

-- Live shoes' server seeds; they enter the log only in a ShoeRevealed event.
CREATE TABLE shoe_secrets (
    shoe_id     text        PRIMARY KEY,
    server_seed text        NOT NULL,
    created_at  timestamptz NOT NULL
);

-- Where each subscription has read up to, written in the same transaction as its projection.
CREATE TABLE checkpoints (
    subscription text        PRIMARY KEY,
    position     bigint      NOT NULL CHECK (position >= 0),
    updated_at   timestamptz NOT NULL
);

REVOKE ALL ON events, idempotency_keys, idempotency_responses, shoe_secrets, checkpoints
    FROM PUBLIC;
GRANT SELECT, INSERT ON events, idempotency_keys, idempotency_responses, shoe_secrets
    TO shoebox_app;
GRANT SELECT, INSERT, UPDATE ON checkpoints TO shoebox_app;
