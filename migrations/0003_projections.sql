-- Read models rebuilt from the log, and the machinery to rebuild one beside the live tables.
-- Every table here is disposable: the log is the truth, and `shoebox projections rebuild`
-- makes any of them again, byte for byte. Money is integer pence, as everywhere.

-- Wallet balances, and the running totals that money conservation is checked against.
CREATE TABLE proj_wallets (
    player_id  text        PRIMARY KEY,
    available  bigint      NOT NULL,
    reserved   bigint      NOT NULL,
    version    integer     NOT NULL,
    position   bigint      NOT NULL,
    credits    bigint      NOT NULL,
    debits     bigint      NOT NULL,
    updated_at timestamptz NOT NULL
);

-- A wallet's statement: one row per wallet event, with the balances after it.
CREATE TABLE proj_wallet_statement (
    player_id       text        NOT NULL,
    version         integer     NOT NULL,
    position        bigint      NOT NULL,
    recorded_at     timestamptz NOT NULL,
    type            text        NOT NULL,
    amount          bigint      NOT NULL,
    reserved_change bigint      NOT NULL,
    available_after bigint      NOT NULL,
    reserved_after  bigint      NOT NULL,
    reason          text,
    table_id        text,
    round_id        text,
    spot            text,
    stake           bigint,
    payout          bigint,
    commission      bigint,
    PRIMARY KEY (player_id, version)
);

-- One row per round: its bets, cards and outcome as JSON documents, and its money in columns.
CREATE TABLE proj_rounds (
    round_id     text        PRIMARY KEY,
    table_id     text        NOT NULL,
    number       integer     NOT NULL,
    position     bigint      NOT NULL,
    opened_at    timestamptz NOT NULL,
    shoe_id      text,
    status       text        NOT NULL,
    outcome      text,
    player_total integer,
    banker_total integer,
    cards        jsonb       NOT NULL,
    bets         jsonb       NOT NULL,
    wagered      bigint      NOT NULL,
    paid_out     bigint      NOT NULL,
    commission   bigint      NOT NULL,
    voided       boolean     NOT NULL,
    void_reason  text,
    ended_at     timestamptz
);
CREATE INDEX proj_rounds_table_position ON proj_rounds (table_id, position);

-- Which rounds each player staked in, for their history page.
CREATE TABLE proj_round_players (
    player_id text   NOT NULL,
    round_id  text   NOT NULL,
    position  bigint NOT NULL,
    PRIMARY KEY (player_id, round_id)
);
CREATE INDEX proj_round_players_player_position ON proj_round_players (player_id, position);

-- Table statistics: each coup's outcome in log order, and each table's current shoe. The
-- roads are drawn from these with domain.roads when read: a void removes a hand from the
-- middle of a road, which redraws everything after it anyway.
CREATE TABLE proj_tables (
    table_id     text    PRIMARY KEY,
    decks        integer NOT NULL,
    current_shoe text
);

CREATE TABLE proj_coups (
    round_id text    PRIMARY KEY,
    table_id text    NOT NULL,
    shoe_id  text    NOT NULL,
    position bigint  NOT NULL,
    outcome  text    NOT NULL,
    voided   boolean NOT NULL
);
CREATE INDEX proj_coups_table_position ON proj_coups (table_id, position);

-- Player history: per player and round, so that a void can take its round out again.
CREATE TABLE proj_player_rounds (
    player_id  text    NOT NULL,
    round_id   text    NOT NULL,
    table_id   text    NOT NULL,
    wagered    bigint  NOT NULL,
    won        bigint  NOT NULL,
    commission bigint  NOT NULL,
    voided     boolean NOT NULL,
    PRIMARY KEY (player_id, round_id)
);

-- The house ledger per table, UTC day and bet type. A reversal is booked on the day of the
-- settlement it reverses (found in proj_ledger_rounds), so a voided round nets to nothing.
CREATE TABLE proj_ledger (
    table_id   text    NOT NULL,
    day        date    NOT NULL,
    spot       text    NOT NULL,
    bets       integer NOT NULL,
    wagered    bigint  NOT NULL,
    paid_out   bigint  NOT NULL,
    commission bigint  NOT NULL,
    PRIMARY KEY (table_id, day, spot)
);

CREATE TABLE proj_ledger_rounds (
    round_id text PRIMARY KEY,
    table_id text NOT NULL,
    day      date NOT NULL
);

CREATE TABLE proj_ledger_tables (
    table_id text    PRIMARY KEY,
    decks    integer NOT NULL
);

-- Which tables make up each projection: a rebuild builds a shadow of each and swaps them all.
CREATE TABLE projection_tables (
    table_name text PRIMARY KEY,
    projection text NOT NULL
);
INSERT INTO projection_tables (table_name, projection) VALUES
    ('proj_wallets', 'wallets'),
    ('proj_wallet_statement', 'wallets'),
    ('proj_rounds', 'rounds'),
    ('proj_round_players', 'rounds'),
    ('proj_tables', 'statistics'),
    ('proj_coups', 'statistics'),
    ('proj_player_rounds', 'players'),
    ('proj_ledger', 'ledger'),
    ('proj_ledger_rounds', 'ledger'),
    ('proj_ledger_tables', 'ledger');

-- A fresh, empty shadow of each of a projection's tables (dropping a stale one), for a rebuild
-- to fill while the live tables keep serving. SECURITY DEFINER because creating, renaming and
-- dropping tables needs ownership, which the application role must not have.
CREATE FUNCTION projection_prepare_shadow(p_projection text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT table_name FROM public.projection_tables
             WHERE projection = p_projection ORDER BY table_name LOOP
        EXECUTE format('DROP TABLE IF EXISTS public.%I', t || '_shadow');
        EXECUTE format('CREATE TABLE public.%I (LIKE public.%I INCLUDING ALL)', t || '_shadow', t);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON public.%I TO shoebox_app',
                       t || '_shadow');
    END LOOP;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no projection named %', p_projection;
    END IF;
END
$$;

-- Put a projection's shadow tables in place of its live ones. Called in the transaction that
-- also moves the projection's checkpoint, so readers see the old model or the new, never a mix.
CREATE FUNCTION projection_swap_shadow(p_projection text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    t text;
BEGIN
    FOR t IN SELECT table_name FROM public.projection_tables
             WHERE projection = p_projection ORDER BY table_name LOOP
        EXECUTE format('ALTER TABLE public.%I RENAME TO %I', t, t || '_retired');
        EXECUTE format('ALTER TABLE public.%I RENAME TO %I', t || '_shadow', t);
        EXECUTE format('DROP TABLE public.%I', t || '_retired');
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION projection_prepare_shadow(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION projection_swap_shadow(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION projection_prepare_shadow(text) TO shoebox_app;
GRANT EXECUTE ON FUNCTION projection_swap_shadow(text) TO shoebox_app;

REVOKE ALL ON proj_wallets, proj_wallet_statement, proj_rounds, proj_round_players, proj_tables,
    proj_coups, proj_player_rounds, proj_ledger, proj_ledger_rounds, proj_ledger_tables,
    projection_tables FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON proj_wallets, proj_wallet_statement, proj_rounds,
    proj_round_players, proj_tables, proj_coups, proj_player_rounds, proj_ledger,
    proj_ledger_rounds, proj_ledger_tables TO shoebox_app;
GRANT SELECT ON projection_tables TO shoebox_app;
