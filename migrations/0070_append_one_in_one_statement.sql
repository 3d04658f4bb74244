-- One append, the usual one, in one statement (issues 22 and 23, the append's CPU).
--
-- append_batch() (0030, 0060) runs about seven statements for one append, and PL/pgSQL loops
-- over its events and streams. Each statement costs its executor's start and end, and those,
-- not the rows, were most of an append's server CPU: 0.39 ms against 0.20 for the same writes
-- as one statement (bench/append_cpu.py). Most appends are one append alone (a bet in its
-- table's turn, or the only append of its group-commit call), well formed, fresh (not a
-- replay), not stale, and on streams that have their head rows already.
--
-- append_one() takes exactly that case in one statement, and hands every other case to
-- append_batch(), unchanged, which stays the reference for what an append means:
--   * the statement first decides, with no lock taken and nothing written, whether the
--     append is one it may take (the shape below): well formed, each written stream one run
--     of consecutive versions from 1 up, no stream named twice (written and guarded, or
--     guarded twice), every stream's head row already there, and the log not busy. Else it
--     declines at once, holding nothing;
--   * it then locks every head row in sorted order (FOR UPDATE where written, FOR SHARE where
--     guarded), exactly as append_batch() does, so the two paths take their locks in one
--     order and cannot deadlock each other; the lock subqueries are gated on the shape;
--   * only when every stream is at its expected version, and the idempotency key (if any) was
--     not taken, does it draw the append's place (after the locks: the transaction has its
--     id, which the sequencer's floor relies on; see 0060), write the key, its response, the
--     events into unsequenced_events and the heads' new versions. Every write hangs on that
--     one condition, in the same statement, so it writes all of them or none;
--   * a stale version or a taken key declines with the rows locked and nothing written:
--     append_batch() then runs in the same transaction, on the same locks (every head row
--     exists, so it inserts none and waits for nothing new), and answers the refusal or the
--     replay as it always has.
-- The answer adds a sixth column: which path took the append (the tests hold each case to its
-- path; the store ignores it).
CREATE FUNCTION append_one(
    the_document text,
    the_key text,
    the_fingerprint text,
    the_response text,
    the_guards text,
    wait_bound text,
    backlog_bound text
)
RETURNS TABLE (
    append_id bigint,
    replayed_result text,
    replayed_response text,
    error_code text,
    error_detail text,
    taken_by text
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public SET plan_cache_mode = force_generic_plan
-- Every read here has an index to go through (heads and keys by their primary keys, the
-- queue from the floor): a generic plan made while the tables look tiny would scan them for
-- the session's life. With sequential scans priced out, a plan's cost passes the threshold of
-- JIT compilation, which then took a second a call: off, as it never pays for statements of a
-- few rows. append_batch() gets both settings too (below): its plans are cached by whichever
-- call plans them first, a direct one or this function's fallback, and must not depend on it.
SET enable_seqscan = off SET jit = off AS $$
DECLARE
    parts constant text[] := string_to_array(the_document, E'\n');
    taken bigint;
    oldest timestamptz;
BEGIN
    WITH bounds AS MATERIALIZED (
        -- As append_batch(): the bound on the wait for the rows' locks, set on this
        -- transaction before any lock below is waited for (the shape reads this first), and
        -- the oldest append still queued, from the sequencer's floor up.
        SELECT CASE WHEN wait_bound IS NOT NULL
                    THEN set_config('lock_timeout', wait_bound, true) END AS bound_set,
               CASE WHEN backlog_bound IS NOT NULL
                    THEN (SELECT u.queued_at FROM public.unsequenced_events AS u
                          WHERE u.append_id > (SELECT f.floor_id FROM public.sequencer_floor AS f
                                             WHERE f.only_row)
                          ORDER BY u.append_id, u.n LIMIT 1) END AS queued_since
    ), busy AS MATERIALIZED (
        SELECT b.queued_since
        FROM bounds AS b
        WHERE b.queued_since < clock_timestamp() - backlog_bound::interval
    ), events_in AS MATERIALIZED (
        -- Each event's halves, and its suffix parsed ("recorded_at" to "version", a few dozen
        -- bytes) where it starts as an event's suffix must: else no stream, and no shape.
        -- Nothing is parsed when the log is busy, so that a busy log refuses any input with
        -- SB003 first, as append_batch() does, whatever a malformed document would raise.
        SELECT k AS n, parts[2 * k - 1] AS prefix, parts[2 * k] AS suffix,
               CASE WHEN left(parts[2 * k], 16) = ',"recorded_at":"'
                    THEN ('{' || substr(parts[2 * k], 2))::jsonb END AS d
        FROM generate_series(1, CASE WHEN EXISTS (SELECT FROM busy) THEN 0
                                     ELSE coalesce(array_length(parts, 1), 0) / 2 END) AS k
    ), ev AS MATERIALIZED (
        SELECT e.n, e.prefix, e.suffix, e.d ->> 'stream_id' AS stream_id,
               (e.d ->> 'version')::integer AS version, e.d ->> 'recorded_at' AS recorded_at
        FROM events_in AS e
    ), runs AS MATERIALIZED (
        -- Each written stream: its first and last new versions, and whether its events are
        -- one run (contiguous) of consecutive versions.
        SELECT r.stream_id, min(r.n) AS first_n, min(r.version) AS first_version,
               max(r.version) AS last_version,
               max(r.n) - min(r.n) + 1 = count(*) AND count(DISTINCT r.version - r.n) = 1
                   AND min(r.version) >= 1 AS one_run
        FROM ev AS r
        WHERE r.stream_id IS NOT NULL
        GROUP BY r.stream_id
    ), guards_in AS MATERIALIZED (
        SELECT g.value ->> 0 AS stream_id, (g.value ->> 1)::integer AS version
        FROM jsonb_array_elements(CASE WHEN EXISTS (SELECT FROM busy) THEN '[]'
                                       ELSE coalesce(the_guards, '[]') END::jsonb) AS g (value)
    ), wanted AS MATERIALIZED (
        -- Every stream with the version it must be at: a written one at its first new version
        -- less one, a guarded one at its guard's.
        SELECT r.stream_id, r.first_version - 1 AS expected, true AS is_written FROM runs AS r
        UNION ALL
        SELECT g.stream_id, g.version, false FROM guards_in AS g
    ), shape AS MATERIALIZED (
        -- Whether this statement may take the append at all: read with no lock taken.
        SELECT coalesce(array_length(parts, 1), 0) > 0
           AND array_length(parts, 1) % 2 = 0
           AND (the_response IS NULL OR the_key IS NOT NULL)
           AND NOT EXISTS (SELECT FROM busy)
           AND NOT EXISTS (SELECT FROM ev AS e
                           WHERE e.stream_id IS NULL OR e.version IS NULL
                              OR e.recorded_at IS NULL)
           AND NOT EXISTS (SELECT FROM runs AS r WHERE NOT r.one_run)
           AND NOT EXISTS (SELECT FROM guards_in AS g
                           WHERE g.stream_id IS NULL OR g.version IS NULL)
           AND (SELECT count(DISTINCT w.stream_id) = count(*) FROM wanted AS w)
           -- A scalar subquery a stream, so always one probe of the primary key: written as
           -- NOT EXISTS it became an anti join, whose generic plan, made while the heads were
           -- few, read the whole index on every call (255 ms at 300,000 heads).
           AND NOT EXISTS (SELECT FROM wanted AS w
                           WHERE (SELECT true FROM public.stream_heads AS h
                                  WHERE h.stream_id = w.stream_id) IS NULL) AS fits
    ), locked AS MATERIALIZED (
        -- The row locks, in sorted order (the subquery's order; each row's scalar subquery
        -- runs as the row is produced), held to the commit. Taken only if the shape fits.
        SELECT l.stream_id, l.expected,
               CASE WHEN (SELECT s.fits FROM shape AS s) THEN
                   CASE WHEN l.is_written
                        THEN (SELECT h.version FROM public.stream_heads AS h
                              WHERE h.stream_id = l.stream_id FOR UPDATE)
                        ELSE (SELECT h.version FROM public.stream_heads AS h
                              WHERE h.stream_id = l.stream_id FOR SHARE) END
               END AS actual
        FROM (SELECT w.stream_id, w.expected, w.is_written FROM wanted AS w
              ORDER BY w.stream_id) AS l
    ), fresh AS MATERIALIZED (
        -- Every stream where it must be (a NULL, where no lock was taken, is not).
        SELECT true AS yes
        WHERE (SELECT bool_and(coalesce(l.actual = l.expected, false)) FROM locked AS l)
    ), new_key AS (
        INSERT INTO public.idempotency_keys (key, fingerprint, result, recorded_at)
        SELECT the_key, the_fingerprint, jsonb_build_object(
                   'versions', (SELECT jsonb_object_agg(v.stream_id, v.version)
                                FROM (SELECT r.stream_id, r.last_version AS version FROM runs AS r
                                      UNION ALL
                                      SELECT g.stream_id, g.version FROM guards_in AS g) AS v),
                   'appended', (SELECT jsonb_agg(jsonb_build_array(r.stream_id, r.first_version,
                                                                   r.last_version)
                                                 ORDER BY r.first_n)
                                FROM runs AS r)),
               (SELECT e.recorded_at::timestamptz FROM ev AS e WHERE e.n = 1)
        FROM fresh
        WHERE the_key IS NOT NULL
        ON CONFLICT (key) DO NOTHING
        RETURNING key, recorded_at
    ), go AS MATERIALIZED (
        SELECT true AS yes FROM fresh
        WHERE the_key IS NULL OR EXISTS (SELECT FROM new_key)
    ), new_response AS (
        INSERT INTO public.idempotency_responses (key, response, recorded_at)
        SELECT k.key, the_response::jsonb, k.recorded_at FROM new_key AS k
        WHERE the_response IS NOT NULL
    ), placed AS MATERIALIZED (
        -- Drawn after every lock, for each row of go, and after the transaction's id (which its
        -- row locks gave it: said here, not assumed), in that order. Not in a WHERE clause, which
        -- the planner runs once before anything else and so would give a refused call an id.
        SELECT CASE WHEN pg_current_xact_id() IS NOT NULL
                    THEN nextval('public.append_order') END AS id
        FROM go
    ), queued AS (
        -- Each document checked to be JSON on the way in, as append_batch() checks it.
        INSERT INTO public.unsequenced_events (append_id, n, stream_id, version, prefix, suffix)
        SELECT p.id, e.n, e.stream_id, e.version, e.prefix, e.suffix
        FROM placed AS p, ev AS e
        WHERE (e.prefix || '0' || e.suffix)::json IS NOT NULL
    ), moved AS (
        -- Through the primary key, one probe a written stream.
        UPDATE public.stream_heads AS h
        SET version = (SELECT r.last_version FROM runs AS r WHERE r.stream_id = h.stream_id)
        WHERE h.stream_id = ANY ((SELECT array_agg(r.stream_id) FROM runs AS r)::text[])
          AND EXISTS (SELECT FROM placed)
    )
    SELECT (SELECT p.id FROM placed AS p), (SELECT b.queued_since FROM busy AS b)
    INTO taken, oldest;

    IF oldest IS NOT NULL THEN
        -- As append_batch() refuses it: nothing was written, and no lock was taken.
        RAISE EXCEPTION 'the log is busy: the oldest unsequenced append waited since %', oldest
            USING ERRCODE = 'SB003',
                  DETAIL = extract(epoch FROM clock_timestamp() - oldest)::text;
    END IF;
    IF taken IS NOT NULL THEN
        append_id := taken;
        taken_by := 'one statement';
        RETURN NEXT;
        RETURN;
    END IF;
    -- The backlog was checked above, before any wait: not again after one (a replay that
    -- waited for its rows would otherwise be refused as busy where append_batch() alone
    -- answers it).
    RETURN QUERY
        SELECT b.append_id, b.replayed_result, b.replayed_response, b.error_code, b.error_detail,
               'append_batch'::text
        FROM public.append_batch(ARRAY[the_document], ARRAY[the_key], ARRAY[the_fingerprint],
                                 ARRAY[the_response], ARRAY[the_guards], wait_bound,
                                 NULL) AS b;
END
$$;

REVOKE ALL ON FUNCTION append_one(text, text, text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_one(text, text, text, text, text, text, text) TO shoebox_app;

-- append_batch() plans with the same settings, called directly (a group-commit batch) or from
-- append_one(): see above.
ALTER FUNCTION append_batch(text[], text[], text[], text[], text[], text, text)
    SET enable_seqscan = off SET jit = off;
