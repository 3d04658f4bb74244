-- Issue 21: every wallet movement of an operator over a time range, for ops and regulators
-- (GET /v1/wallet-movements), read from the wallets read model's statement rows.
--
-- The operator is the player key's prefix (service/application/operators.py: `op/player`, or a
-- bare id for the default operator); kept as a column so that an operator's movements have an
-- index of their own. The rows already there get it from their player keys; the projection
-- writes it from now on, and a rebuild makes it again from the log.
ALTER TABLE proj_wallet_statement ADD COLUMN operator text;
UPDATE proj_wallet_statement
SET operator = CASE WHEN strpos(player_id, '/') > 0 THEN split_part(player_id, '/', 1)
                    ELSE 'default' END;
ALTER TABLE proj_wallet_statement ALTER COLUMN operator SET NOT NULL;

-- A page is a keyset of (recorded_at, position) inside [from, to): one operator's movements,
-- or every operator's, each through its own index ending in the keyset, so a page reads only
-- its own rows however long the history before it.
CREATE INDEX proj_wallet_statement_operator_time
    ON proj_wallet_statement (operator, recorded_at, position);
CREATE INDEX proj_wallet_statement_time ON proj_wallet_statement (recorded_at, position);

-- A shadow left by an interrupted rebuild has the old columns: the next rebuild makes a new one.
DROP TABLE IF EXISTS proj_wallet_statement_shadow;
