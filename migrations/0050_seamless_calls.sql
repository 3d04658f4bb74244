-- Issue 24: seamless operators, whose players' money lives in the operator's own wallet
-- (docs/wallets.md, "How it is wired").
--
-- seamless_sessions: each seamless player's current session token, which every `bet` call
-- must carry. Not events: the token is the operator's secret for the player and never enters
-- the log (SessionOpened holds its SHA-256 only); a row is replaced by the next session.
CREATE TABLE IF NOT EXISTS seamless_sessions (
    player_id    text PRIMARY KEY,
    operator     text NOT NULL,
    token        text NOT NULL,
    token_sha256 text NOT NULL,
    opened_at    timestamptz NOT NULL
);

-- seamless_calls: every money call of a seamless player, keyed by its transaction id.
--
-- Bets are written twice: as 'in_flight' by the bet path just before it calls the wallet (so
-- that a debit whose bet never reached the log is found and rolled back), then by the
-- projection of the log. Wins and rollbacks are written only by that projection, a
-- checkpointed consumer of sequenced events (service/application/seamless_calls.py), in the
-- same transaction as its checkpoint, so each is queued exactly once; the job `deliver_due`
-- sends the owed ones. The log stays the story: each outcome is also an event of the player's
-- seamless stream; this table is where the retries keep their state.
CREATE TABLE IF NOT EXISTS seamless_calls (
    transaction_uuid text PRIMARY KEY,
    request_uuid     text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('bet', 'win', 'rollback')),
    operator         text NOT NULL,
    player_id        text NOT NULL,
    table_id         text NOT NULL,
    round_id         text NOT NULL,
    spot             text NOT NULL,
    amount           bigint NOT NULL CHECK (amount >= 0),
    reference        text[] NOT NULL DEFAULT '{}',
    -- bet: in_flight, confirmed, refused, uncertain (its rollback is owed), parked (likewise);
    -- win and rollback: owed, confirmed, parked.
    state            text NOT NULL CHECK (state IN
        ('in_flight', 'owed', 'confirmed', 'refused', 'uncertain', 'parked')),
    -- The seamless stream's version at which the bet's outcome is (or will be) recorded.
    stream_version   bigint,
    -- A bet: the win or rollback that closed it. A win: the rollback that took it back.
    closed_by        text,
    created_at       timestamptz NOT NULL,
    next_attempt_at  timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    last_reason      text,
    confirmed_at     timestamptz,
    flagged_at       timestamptz,
    parked_at        timestamptz
);
-- The owed calls, by when they are next due: what `deliver_due` reads every 2 s.
CREATE INDEX IF NOT EXISTS seamless_calls_due
    ON seamless_calls (next_attempt_at) WHERE state = 'owed';
-- A spot's open debits, which a StakeReturned rolls back and a BetSettled settles.
CREATE INDEX IF NOT EXISTS seamless_calls_spot
    ON seamless_calls (table_id, round_id, player_id, spot);
CREATE INDEX IF NOT EXISTS seamless_calls_in_flight
    ON seamless_calls (created_at) WHERE state = 'in_flight';
CREATE INDEX IF NOT EXISTS seamless_calls_operator
    ON seamless_calls (operator, created_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON seamless_sessions, seamless_calls TO shoebox_app;
