-- A shoe's seed is kept for its table and nonce, at most one per pair, so none is orphaned.
--
-- The seed of a new shoe is stored before its ShoeOpened is appended (a seed must never be
-- lost once its commitment is public). When that append lost a race (a twin in another
-- process opened the table's shoe first), the seed stayed in shoe_secrets, referenced by no
-- ShoeOpened, and the app role cannot delete it. Now an opening claims the seed of its
-- table's next nonce: the first claim of (table_id, nonce) stores its seed and every later
-- one (the loser of the race, a retry) gets that same seed and shoe id back, so whichever
-- attempt's append wins publishes the one seed stored for that shoe.
--
-- Reusing the seed is safe because it was never published: a seed's commitment enters the
-- log only in the ShoeOpened of its own nonce, and a table opens each nonce once. Until
-- that ShoeOpened is appended nobody outside shoe_secrets has seen the seed or its hash; once
-- it is, no opening asks for that nonce again (the next one is nonce + 1), so a published
-- seed is never handed out twice. See docs/verification.md.
--
-- Rows stored before this migration keep NULLs (a unique index lets NULLs repeat); their
-- shoes' nonces are all behind their tables, so no new claim can meet them.
ALTER TABLE shoe_secrets ADD COLUMN table_id text, ADD COLUMN nonce integer;

CREATE UNIQUE INDEX shoe_secrets_table_nonce ON shoe_secrets (table_id, nonce);
