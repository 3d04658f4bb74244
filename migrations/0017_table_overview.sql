-- Issue 21: the ops dashboard reads every table in one statement. Before, it asked the API five
-- times a table at each refresh (settings, live state, statistics, ledger, rounds), so 200
-- tables cost a thousand calls. Disposable like every read model: `shoebox projections
-- rebuild overview` makes it again from the log.

-- One row a table: its settings, who sits where, its round and shoe, kept by the overview
-- projection (service/application/read_models/overview.py). Pages go by `position`, the
-- TableCreated's, so tables are listed in the order they were created, as GET /v1/tables does.
CREATE TABLE proj_table_overview (
    table_id         text        PRIMARY KEY,
    position         bigint      NOT NULL,
    version          integer     NOT NULL,
    settings         jsonb       NOT NULL,
    seats            jsonb       NOT NULL,
    round_id         text,
    round_number     integer,
    round_phase      text,
    window_closes_at timestamptz,
    shoe_id          text,
    shoe_hash        text,
    shoe_hands       integer,
    shoe_coups       integer,
    latest_coup      jsonb,
    suspended        boolean     NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE UNIQUE INDEX proj_table_overview_position ON proj_table_overview (position);

-- The overview's "rounds a minute" counts each table's rounds that ended in the last minute:
-- through this index, a table's newest rounds only, however many it has dealt.
CREATE INDEX proj_rounds_table_ended_at ON proj_rounds (table_id, ended_at);

INSERT INTO projection_tables (table_name, projection) VALUES
    ('proj_table_overview', 'overview');

REVOKE ALL ON proj_table_overview FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON proj_table_overview TO shoebox_app;
