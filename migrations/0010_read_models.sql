-- Issue 12: every read that used to scan the log goes through an index or a read model, so a
-- table that has dealt for years answers as fast as a new one. The read models are disposable
-- like those of 0003 (`shoebox projections rebuild` makes them again, byte for byte); the
-- indexes on `events` are the only change to the log's table, and they add no row.

-- The significant-event log (service/application/read_models/significant.py): one row per
-- significant event, naming what a regulator filters by; the rest of the entry is read from
-- `events` by its primary key. Pages go by position, the keyset.
CREATE TABLE proj_significant (
    position    bigint      PRIMARY KEY,
    kind        text        NOT NULL,
    type        text        NOT NULL,
    actor       text        NOT NULL,
    table_id    text,
    recorded_at timestamptz NOT NULL
);
-- One per filter, each ending in the keyset, so a filtered page reads only its own rows.
CREATE INDEX proj_significant_type_position ON proj_significant (type, position);
CREATE INDEX proj_significant_actor_position ON proj_significant (actor, position);
CREATE INDEX proj_significant_table_position ON proj_significant (table_id, position);
CREATE INDEX proj_significant_recorded_at ON proj_significant (recorded_at, position);

-- Shoes by id and by table (service/application/read_models/shoes.py): the published facts,
-- what has been dealt, and the versions of the table stream that hold the shoe's events and
-- its rounds' events, so that reading a shoe back reads that range of its stream, not all of it.
CREATE TABLE proj_shoes (
    shoe_id          text        PRIMARY KEY,
    table_id         text        NOT NULL,
    position         bigint      NOT NULL,
    server_seed_hash text        NOT NULL,
    client_seed      text        NOT NULL,
    nonce            integer     NOT NULL,
    decks            integer     NOT NULL,
    hands            integer     NOT NULL,
    hands_dealt      integer     NOT NULL,
    cards_dealt      integer     NOT NULL,
    retired          boolean     NOT NULL,
    server_seed      text,
    first_version    integer     NOT NULL,
    last_version     integer     NOT NULL
);
CREATE INDEX proj_shoes_table_position ON proj_shoes (table_id, position);

-- Which shoe dealt each round, and the table-stream version its round opened at: a round's
-- bets come before its first card, and a void may come long after its shoe retired.
CREATE TABLE proj_shoe_rounds (
    round_id       text    PRIMARY KEY,
    table_id       text    NOT NULL,
    opened_version integer NOT NULL,
    shoe_id        text
);

-- Chat by table (service/application/read_models/chat.py), paged by the chat stream's version.
CREATE TABLE proj_chat (
    table_id  text        NOT NULL,
    version   integer     NOT NULL,
    position  bigint      NOT NULL,
    player_id text        NOT NULL,
    text      text        NOT NULL,
    posted_at timestamptz NOT NULL,
    PRIMARY KEY (table_id, version)
);

-- The invariants check, kept by the rounds projection as each round changes, so that
-- GET /v1/ops/invariants reads the violations found so far instead of rereading every round.
CREATE TABLE proj_round_violations (
    round_id text    NOT NULL,
    seq      integer NOT NULL,
    position bigint  NOT NULL,
    "check"  text    NOT NULL,
    detail   text    NOT NULL,
    PRIMARY KEY (round_id, seq)
);
CREATE INDEX proj_round_violations_position ON proj_round_violations (position, round_id, seq);

-- Running totals of the rounds projection: how many dealt rounds have been checked.
CREATE TABLE proj_round_totals (
    name    text   PRIMARY KEY,
    checked bigint NOT NULL
);

INSERT INTO projection_tables (table_name, projection) VALUES
    ('proj_significant', 'significant'),
    ('proj_shoes', 'shoes'),
    ('proj_shoe_rounds', 'shoes'),
    ('proj_chat', 'chat'),
    ('proj_round_violations', 'rounds'),
    ('proj_round_totals', 'rounds');

REVOKE ALL ON proj_significant, proj_shoes, proj_shoe_rounds, proj_chat, proj_round_violations,
    proj_round_totals FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON proj_significant, proj_shoes, proj_shoe_rounds,
    proj_chat, proj_round_violations, proj_round_totals TO shoebox_app;

-- The export's slice (service/regulator/export.py), from the log itself so that an export
-- never depends on a read model having caught up:
-- * a table's events in a time range: where the slice starts and ends;
CREATE INDEX events_stream_recorded_at ON events (stream_id, recorded_at);
-- * the wallet events of a round, whatever the wallet: the slice runs on to the last of them.
--   Partial, so only wallet events pay for it.
CREATE INDEX events_wallet_round ON events ((payload ->> 'round_id'), position)
    WHERE category = 'wallet';
-- * a shoe's opening and its revealed seed, which may lie outside the slice. Only these three
--   types, a handful of rows a shoe; the names are those of domain/table.py's shoe events.
CREATE INDEX events_shoe ON events ((payload ->> 'shoe_id'), position)
    WHERE type IN ('ShoeOpened', 'ShoeRetired', 'ShoeRevealed');
