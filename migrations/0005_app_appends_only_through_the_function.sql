-- The application role appends only through append_events().
--
-- 0001 granted shoebox_app INSERT on events so that it could append by hand after
-- lock_events_for_append(). Since 0002 every append goes through append_events(), which is
-- SECURITY DEFINER and does what a bare INSERT skips: it takes the lock, checks each stream's
-- expected version, computes the position from the head and the hash from the previous one,
-- and records the idempotency key. With INSERT, a compromised or buggy application could write
-- rows with any position, any hash and any recorded_at, and nothing but a later audit verify
-- would notice. Now it may only read the table and call the function; the function runs as
-- the owner, which keeps INSERT.
--
-- UPDATE, DELETE and TRUNCATE were never granted (and triggers refuse them for every role,
-- owner included); they are revoked here too, with everything else, so that the grant reads
-- as exactly what the role may do.
REVOKE ALL ON public.events FROM shoebox_app;
GRANT SELECT ON public.events TO shoebox_app;
