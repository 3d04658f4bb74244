-- The usual append in the fewest executor nodes: append_fast() (issues 22 and 23, the append's
-- server CPU).
--
-- append_one() (0070) takes the usual append in one statement, but that statement parses the
-- document, groups its runs, checks its shape, probes and locks the heads, and only then
-- writes: some sixty plan nodes, each started and ended on every call. Its server CPU was 2.2
-- times the unlocked insert's, where the design's writes alone (the heads' upsert, the queue,
-- the key: bench/contention.py's FLOOR_STATEMENT) cost 1.0 to 1.3 times it.
--
-- append_fast() takes the same usual append with the same meaning, built differently:
--   * the document is read in PL/pgSQL's own expressions (no executor): each event's suffix
--     parsed once, its stream and version checked to make one run of consecutive versions per
--     stream, no stream named twice, written and guarded alike;
--   * one statement then locks and checks and writes: the guards' heads FOR SHARE, in sorted
--     order, then the written heads by an upsert in sorted order, which locks each row and
--     moves it only if it is at the version expected (a new stream's head is inserted, and
--     must be at its first version); the append's place, its rows in the queue, the key and
--     its response hang on every head having moved and every guard having held;
--   * anything else, it refuses with SB004 ("not taken here") and the whole statement rolls
--     back with it, writes and locks alike. The caller then sends append_one(), which answers
--     it as it always has (a refusal, a replay, a new stream written past its first version,
--     a malformed document). So a stale version, a taken key or an odd shape costs a second
--     call, and the usual append one.
-- Its locks are taken in one sorted order over all its streams, as append_one()'s and
-- append_batch()'s: it takes only appends whose guards all sort before its written streams
-- (a bet's "player:" guard before its "table:" and "wallet:" streams), so guards first, then
-- writes, is that order.
--
-- The log's back-pressure is checked first, as append_one() checks it: a busy log refuses
-- with SB003 before any lock, write or transaction id. The lock wait's bound is set before
-- any lock is waited for.
--
-- A whole-statement rollback is the only way it refuses after its upsert, because the upsert
-- writes as it locks: a SB004 from it means nothing of it stays. It is sent alone, as its own
-- transaction (the store's autocommit append); inside a longer transaction (a table's turn,
-- an outbox append) the store keeps append_one(), whose refusals leave the transaction usable.
CREATE FUNCTION append_fast(
    the_document text,
    the_key text,
    the_fingerprint text,
    the_response text,
    the_guards text,
    wait_bound text,
    backlog_bound text
)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
-- As append_one(): generic plans through the primary keys, and no JIT (see 0070).
SET search_path = pg_catalog, public SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off SET jit = off AS $$
DECLARE
    parts constant text[] := string_to_array(the_document, E'\n');
    total constant integer := coalesce(array_length(parts, 1), 0);
    guards jsonb;
    event jsonb;
    stream text;
    version integer;
    last_stream text;
    last_version integer;
    recorded text;
    -- The written streams in document order, each with its first and last new versions.
    streams text[] := '{}';
    firsts integer[] := '{}';
    lasts integer[] := '{}';
    -- Each event's stream and version, in document order.
    event_streams text[] := '{}';
    event_versions integer[] := '{}';
    first_written text;
    guard_streams text[] := '{}';
    guard_versions integer[] := '{}';
    versions jsonb := '{}';
    appended jsonb := '[]';
    oldest timestamptz;
    taken bigint;
    keyed boolean;
BEGIN
    IF wait_bound IS NOT NULL THEN
        PERFORM set_config('lock_timeout', wait_bound, true);
    END IF;
    IF backlog_bound IS NOT NULL THEN
        -- As append_one()'s bound: the oldest append still queued, from the sequencer's floor.
        SELECT u.queued_at INTO oldest
        FROM public.unsequenced_events AS u
        WHERE u.append_id > (SELECT f.floor_id FROM public.sequencer_floor AS f WHERE f.only_row)
        ORDER BY u.append_id, u.n
        LIMIT 1;
        IF oldest < clock_timestamp() - backlog_bound::interval THEN
            RAISE EXCEPTION 'the log is busy: the oldest unsequenced append waited since %', oldest
                USING ERRCODE = 'SB003',
                      DETAIL = extract(epoch FROM clock_timestamp() - oldest)::text;
        END IF;
    END IF;

    IF total = 0 OR total % 2 <> 0 OR (the_response IS NOT NULL AND the_key IS NULL) THEN
        RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
    END IF;
    FOR k IN 1 .. total / 2 LOOP
        IF left(parts[2 * k], 16) <> ',"recorded_at":"' THEN
            RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
        END IF;
        -- A malformed suffix raises here as append_one() raises for it (22P02).
        event := ('{' || substr(parts[2 * k], 2))::jsonb;
        stream := event ->> 'stream_id';
        version := (event ->> 'version')::integer;
        IF stream IS NULL OR version IS NULL OR event ->> 'recorded_at' IS NULL THEN
            RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
        END IF;
        IF k = 1 THEN
            recorded := event ->> 'recorded_at';
        END IF;
        IF stream = last_stream THEN
            IF version <> last_version + 1 THEN
                RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
            END IF;
            lasts[cardinality(lasts)] := version;
        ELSE
            -- A stream's events are one run: a stream met again after another is not taken.
            IF version < 1 OR stream = ANY (streams) THEN
                RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
            END IF;
            streams := streams || stream;
            firsts := firsts || version;
            lasts := lasts || version;
        END IF;
        event_streams := event_streams || stream;
        event_versions := event_versions || version;
        last_stream := stream;
        last_version := version;
    END LOOP;

    IF the_guards IS NOT NULL THEN
        FOR k IN 1 .. cardinality(streams) LOOP
            IF first_written IS NULL OR streams[k] < first_written THEN
                first_written := streams[k];
            END IF;
        END LOOP;
        guards := the_guards::jsonb;
        IF jsonb_typeof(guards) <> 'array' THEN
            RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
        END IF;
        FOR k IN 0 .. jsonb_array_length(guards) - 1 LOOP
            stream := guards -> k ->> 0;
            version := (guards -> k ->> 1)::integer;
            -- Every guard sorts before every written stream (so the locks below go in one
            -- sorted order), and no stream is named twice.
            IF stream IS NULL OR version IS NULL OR stream = ANY (guard_streams)
               OR stream >= first_written THEN
                RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
            END IF;
            guard_streams := guard_streams || stream;
            guard_versions := guard_versions || version;
        END LOOP;
    END IF;

    -- The key's result as append_batch() stores it: each stream's version after the append
    -- (the guards' too), and each written stream's run in document order.
    FOR k IN 1 .. cardinality(streams) LOOP
        versions := versions || jsonb_build_object(streams[k], lasts[k]);
        appended := appended || jsonb_build_array(jsonb_build_array(streams[k], firsts[k], lasts[k]));
    END LOOP;
    FOR k IN 1 .. cardinality(guard_streams) LOOP
        versions := versions || jsonb_build_object(guard_streams[k], guard_versions[k]);
    END LOOP;

    WITH guarded AS MATERIALIZED (
        -- The guards' heads, locked FOR SHARE in sorted order: how many are where they must be.
        SELECT count(*) AS held
        FROM (SELECT h.stream_id, h.version FROM public.stream_heads AS h
              WHERE h.stream_id = ANY (guard_streams)
              ORDER BY h.stream_id
              FOR SHARE OF h) AS g
        WHERE g.version = guard_versions[array_position(guard_streams, g.stream_id)]
    ), heads AS (
        -- The written heads, locked (and moved) in sorted order, only once every guard held.
        -- A head inserted here stands at 0 unless this is its stream's first append: so
        -- "wrong" marks a head that was neither at the version expected nor new and first.
        INSERT INTO public.stream_heads AS h (stream_id, version)
        SELECT w.stream_id, CASE WHEN w.first_version = 1 THEN w.last_version ELSE 0 END
        FROM unnest(streams, firsts, lasts) AS w (stream_id, first_version, last_version)
        WHERE (SELECT g.held FROM guarded AS g) = cardinality(guard_streams)
        ORDER BY w.stream_id
        ON CONFLICT (stream_id) DO UPDATE
        SET version = lasts[array_position(streams, h.stream_id)]
        WHERE h.version = firsts[array_position(streams, h.stream_id)] - 1
        RETURNING h.version <> lasts[array_position(streams, h.stream_id)] AS wrong
    ), placed AS MATERIALIZED (
        -- Drawn after every lock, once the transaction has its id (the sequencer's floor
        -- relies on that order: 0060), and only if every head moved as it must.
        SELECT nextval('public.append_order') AS id
        WHERE (SELECT count(*) FILTER (WHERE NOT h.wrong) FROM heads AS h) = cardinality(streams)
          AND pg_current_xact_id() IS NOT NULL
    ), queued AS (
        -- Each document checked to be JSON on the way in, as append_one() checks it.
        INSERT INTO public.unsequenced_events (append_id, n, stream_id, version, prefix, suffix)
        SELECT p.id, e.n, e.stream_id, e.version, parts[2 * e.n - 1], parts[2 * e.n]
        FROM placed AS p,
             unnest(event_streams, event_versions) WITH ORDINALITY AS e (stream_id, version, n)
        WHERE (parts[2 * e.n - 1] || '0' || parts[2 * e.n])::json IS NOT NULL
    ), new_key AS (
        INSERT INTO public.idempotency_keys (key, fingerprint, result, recorded_at)
        SELECT the_key, the_fingerprint,
               jsonb_build_object('versions', versions, 'appended', appended),
               recorded::timestamptz
        FROM placed
        WHERE the_key IS NOT NULL
        ON CONFLICT (key) DO NOTHING
        RETURNING key, recorded_at
    ), new_response AS (
        INSERT INTO public.idempotency_responses (key, response, recorded_at)
        SELECT nk.key, the_response::jsonb, nk.recorded_at FROM new_key AS nk
        WHERE the_response IS NOT NULL
    )
    SELECT (SELECT p.id FROM placed AS p), the_key IS NULL OR EXISTS (SELECT FROM new_key)
    INTO taken, keyed;

    IF taken IS NULL OR NOT keyed THEN
        -- A head or a guard not where it must be, or the key taken: nothing of this statement
        -- stays (the error rolls it back), and append_one() answers it.
        RAISE EXCEPTION 'append_fast() does not take this append' USING ERRCODE = 'SB004';
    END IF;
    RETURN taken;
END
$$;

REVOKE ALL ON FUNCTION append_fast(text, text, text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_fast(text, text, text, text, text, text, text) TO shoebox_app;
