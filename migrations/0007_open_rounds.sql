-- The index of open rounds (service/application/game/open_rounds.py): one row per table whose
-- round has opened and not yet settled, ended without play or been voided. Recovery and the
-- projector's sweeper find lapsed windows here with one range scan, instead of replaying every
-- table's stream. A read model like those of 0003: rebuilt from the log, never the truth.
CREATE TABLE open_rounds (
    table_id         text        PRIMARY KEY,
    round_id         text        NOT NULL,
    window_closes_at timestamptz NOT NULL,
    position         bigint      NOT NULL
);
-- "Which windows have closed by now?": the due rows alone, however many tables there are.
CREATE INDEX open_rounds_window_closes_at ON open_rounds (window_closes_at);

-- So that `shoebox projections rebuild open_rounds` can build it beside the live one.
INSERT INTO projection_tables (table_name, projection) VALUES ('open_rounds', 'open_rounds');

REVOKE ALL ON open_rounds FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON open_rounds TO shoebox_app;
