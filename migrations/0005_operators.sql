-- Operators: several casinos share one Shoebox (docs/api.md, "Operators").
-- Players of operators other than the default are named `operator/player` in the log; the
-- log itself is untouched. This adds what the read side needs to cut by operator.

-- The secret under which another operator's players are aliased in responses. It lives
-- here, not in the log or the code, so aliases stay stable across restarts and workers.
CREATE TABLE service_secrets (
    name  text  PRIMARY KEY,
    value bytea NOT NULL
);
REVOKE ALL ON service_secrets FROM PUBLIC;
GRANT SELECT, INSERT ON service_secrets TO shoebox_app;

-- The house ledger, cut by the operator of the player who bet. Every row so far is the
-- default operator's: no other operator had players before this migration.
ALTER TABLE proj_ledger ADD COLUMN operator text NOT NULL DEFAULT 'default';
-- A rebuild swaps in a copy of the table, so the key's name is looked up, not assumed.
DO $$
DECLARE
    k text;
BEGIN
    SELECT conname INTO k FROM pg_constraint
    WHERE conrelid = 'public.proj_ledger'::regclass AND contype = 'p';
    EXECUTE format('ALTER TABLE public.proj_ledger DROP CONSTRAINT %I', k);
END
$$;
ALTER TABLE proj_ledger ADD PRIMARY KEY (table_id, day, spot, operator);
ALTER TABLE proj_ledger ALTER COLUMN operator DROP DEFAULT;
DROP TABLE IF EXISTS proj_ledger_shadow;
