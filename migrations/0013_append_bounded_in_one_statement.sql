-- The append bounds its own wait, so that a bet is one statement.
--
-- The store bounded an append's waits by setting lock_timeout and statement_timeout on the
-- pooled session before the append and resetting them after it, pipelined: three statements
-- a bet where one would do, and the two around the append cost a bet more of its time than the
-- function's hashing, parsing and NOTIFY together (docs/benchmarks.md, issue 14, "One warm
-- keyed bet, taken apart"). A bound set inside the append's own statement can still bound its
-- lock: lock_timeout is read when a lock is waited for, whereas statement_timeout is armed
-- when a statement starts and cannot be. The lock (and the key's row, under it) is the only
-- thing an append waits for, and the rest of it is bounded by its size (64 appends at most), so
-- the caller passes the smaller of its two bounds as the lock's, and tells the two apart
-- itself when the lock's wait runs out (events/postgres.py).
--
-- Set locally: it ends with the statement's transaction (autocommit), so no user of the pooled
-- session after the append inherits it, and nothing has to be reset.
CREATE FUNCTION append_batch(
    documents text[],
    idempotency_keys text[],
    request_fingerprints text[],
    responses text[],
    wait_bound text
)
RETURNS TABLE (
    first_position bigint,
    last_position bigint,
    replayed_result text,
    replayed_response text,
    error_code text,
    error_detail text
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('lock_timeout', wait_bound, true);
    RETURN QUERY SELECT * FROM public.append_batch(
        documents, idempotency_keys, request_fingerprints, responses);
END
$$;

REVOKE ALL ON FUNCTION append_batch(text[], text[], text[], text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_batch(text[], text[], text[], text[], text) TO shoebox_app;
