-- The log takes appends in parallel; one sequencer gives them their positions (issue 22).
--
-- Until now every append took LOCK TABLE events IN EXCLUSIVE MODE and held it through its
-- commit's disk flush, so that positions committed in position order and the hash chain had
-- one writer. Every table of the casino queued behind every other table's flush.
--
-- Now an append does two things that need no table-wide lock:
--   * it checks its streams' versions against one row per stream (stream_heads), locked
--     FOR UPDATE for the streams it writes and FOR SHARE for its guards, in sorted order, so
--     that two appends that share no stream never wait for each other, and a deadlock needs
--     two appends to take the same two rows in opposite orders, which sorting rules out;
--   * it writes its events, without position or hash, to unsequenced_events, and its
--     idempotency key beside them, in the same transaction, and commits (and flushes).
-- A single sequencer (sequence_appends() below, run by whichever process holds the
-- sequencer's advisory lock) then moves committed appends into events in batches, one
-- transaction a batch: it gives them their positions and their hashes, raises recorded_at to
-- the head's where it is earlier, inserts them into events and deletes them from
-- unsequenced_events. So an event is in exactly one of the two tables at any moment, events
-- keeps every row it ever had, unchanged, and its position stays NOT NULL.
--
-- Why no reader can skip a late commit or see what a crash could take back: a reader by
-- position reads only events, and only the sequencer writes events, one transaction at a
-- time under its lock, each reading the head after the previous one committed. So positions
-- become visible in position order, whatever order the appends committed in. The sequencer
-- sees an append only once its transaction is visible, which PostgreSQL makes it only after
-- its commit record is flushed (synchronous_commit stays on); an append that commits late is
-- simply found by a later batch and given a later position.

-- One row per stream: its newest version, sequenced or not. The row an append locks instead
-- of the whole table.
CREATE TABLE stream_heads (
    stream_id text    PRIMARY KEY CHECK (stream_id <> ''),
    version   integer NOT NULL CHECK (version >= 0)
);

-- The existing log's streams. Under the old lock, so that no append of the old code lands
-- between this snapshot and the switch (a migration runs in one transaction).
LOCK TABLE events IN EXCLUSIVE MODE;
INSERT INTO stream_heads (stream_id, version)
SELECT stream_id, max(version) FROM events GROUP BY stream_id;

-- The order the sequencer takes appends in. Drawn by an append after it holds every row lock
-- it needs: an append that shares a stream with it (as writer, or as a guard against a
-- writer) can only take its own locks, and so draw its number, after this one committed. So
-- two appends that touch the same stream are sequenced in the order they committed (a
-- stream's versions ascend along positions, and a guarded decision precedes the write that
-- would have made it stale), and appends that share nothing may go in either order.
CREATE SEQUENCE append_order AS bigint;

-- Committed appends that have no position yet. Never updated (the trigger below); the
-- sequencer moves rows out into events, inserting and deleting in one transaction. Each event
-- is kept as the two halves of its canonical document around its position (as the append was
-- sent it), so the sequencer hashes the bytes the client produced.
CREATE TABLE unsequenced_events (
    append_id bigint      NOT NULL,
    n         integer     NOT NULL CHECK (n >= 1),
    stream_id text        NOT NULL,
    version   integer     NOT NULL CHECK (version >= 1),
    prefix    text        NOT NULL,
    suffix    text        NOT NULL,
    -- The server's time when it was queued: only to measure the sequencer's lag and to refuse
    -- appends when it falls behind. recorded_at (in the suffix) is still the injected clock's.
    queued_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (append_id, n),
    -- Optimistic concurrency's backstop here as in events.
    UNIQUE (stream_id, version)
);

-- As events since 0012: a stream's read joins both tables, and never in a parallel plan.
ALTER TABLE unsequenced_events SET (parallel_workers = 0);
-- A queue: every row is deleted within milliseconds, and the dead ones sit at the start of
-- its primary key, where the sequencer and the back-pressure check begin their reads. So it
-- is vacuumed whenever autovacuum visits it and finds a few hundred dead rows (the default
-- waits for 20% of the table, and the table's live size is near zero), at full speed.
ALTER TABLE unsequenced_events SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 500,
    autovacuum_vacuum_cost_delay = 0
);

CREATE TRIGGER unsequenced_events_no_update
    BEFORE UPDATE OR TRUNCATE ON unsequenced_events
    FOR EACH STATEMENT EXECUTE FUNCTION events_refuse_change();

-- The stored answer of an idempotency key names streams and versions, never positions: a
-- fresh append has none when it is answered. "appended" lists the append's streams in append
-- order with their first and last new versions, from which a replay reads its events back by
-- version. Keys recorded before this migration had positions: they are given the same list,
-- read from the log (they are all sequenced), and keep their positions beside it.
UPDATE idempotency_keys AS k
SET result = k.result || jsonb_build_object('appended', coalesce((
    SELECT jsonb_agg(jsonb_build_array(s.stream_id, s.first_version, s.last_version)
                     ORDER BY s.first_position)
    FROM (
        SELECT e.stream_id, min(e.version) AS first_version, max(e.version) AS last_version,
               min(e.position) AS first_position
        FROM events AS e
        WHERE e.position BETWEEN (k.result ->> 'first_position')::bigint
                             AND (k.result ->> 'last_position')::bigint
        GROUP BY e.stream_id
    ) AS s), '[]'::jsonb))
WHERE k.result ? 'first_position' AND NOT k.result ? 'appended';

-- Every path that wrote events directly goes: from now on only sequence_appends() does.
DROP FUNCTION append_batch(text[], text[], text[], text[]);
DROP FUNCTION append_batch(text[], text[], text[], text[], text);
DROP FUNCTION append_batch(text[], text[], text[], text[], text[], text);
DROP FUNCTION append_events(text, text, text, text);
DROP FUNCTION append_events(text, text, text);
DROP FUNCTION lock_events_for_append();

-- The append. The arguments are 0014's (one entry per append of a group-commit batch) plus
-- the bound on the sequencer's backlog: when the oldest unsequenced append is older than it,
-- the whole call is refused with SB003 (the log is busy: no sequencer, or one far behind),
-- so that a backlog stays bounded and no reader waits on it without bound.
--
-- It answers, per append, the append's place in the sequencer's order (append_id), or the
-- stored result and response of a replayed key, or a refusal (SB001 stale version or guard,
-- SB002 key reused for another request). Never a position.
CREATE FUNCTION append_batch(
    documents text[],
    idempotency_keys text[],
    request_fingerprints text[],
    responses text[],
    guards text[],
    wait_bound text,
    backlog_bound text
)
RETURNS TABLE (
    append_id bigint,
    replayed_result text,
    replayed_response text,
    error_code text,
    error_detail text
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    append_count constant integer := coalesce(array_length(documents, 1), 0);
    parts text[];
    prefixes text[] := '{}';
    suffixes text[] := '{}';
    event_streams text[] := '{}';
    event_versions integer[] := '{}';
    event_start integer[] := '{}';
    event_count integer[] := '{}';
    stream_ids text[] := '{}';
    expected_versions integer[] := '{}';
    new_versions integer[] := '{}';
    first_versions integer[] := '{}';
    writes boolean[] := '{}';
    stream_start integer[] := '{}';
    stream_count integer[] := '{}';
    answers jsonb[] := '{}';
    total integer := 0;
    streams integer := 0;
    events_here integer;
    streams_here integer;
    document jsonb;
    stream_id text;
    version integer;
    -- The locked streams, sorted, with their versions as this batch moves them.
    locked text[];
    locked_versions integer[];
    written text[];
    this_key text;
    stored record;
    conflict_at integer;
    actual integer;
    oldest timestamptz;
    guard record;
    appended boolean := false;
    recorded_keys bigint;
    -- Per event: its append's id and its place in it, once the append is taken (not refused
    -- nor replayed); the batch's events go into unsequenced_events in one statement.
    event_append_ids bigint[] := '{}';
    event_n integer[] := '{}';
    taken boolean[] := '{}';
BEGIN
    IF wait_bound IS NOT NULL THEN
        PERFORM set_config('lock_timeout', wait_bound, true);
    END IF;
    IF append_count = 0 THEN
        RETURN;
    END IF;
    IF coalesce(array_length(idempotency_keys, 1), 0) <> append_count
       OR coalesce(array_length(request_fingerprints, 1), 0) <> append_count
       OR coalesce(array_length(responses, 1), 0) <> append_count
       OR (guards IS NOT NULL AND coalesce(array_length(guards, 1), 0) <> append_count) THEN
        RAISE EXCEPTION 'append_batch needs a key, a fingerprint, a response and guards per append'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Back-pressure: through the primary key, the oldest append still waiting.
    IF backlog_bound IS NOT NULL THEN
        SELECT u.queued_at INTO oldest FROM public.unsequenced_events AS u
        ORDER BY u.append_id, u.n LIMIT 1;
        IF oldest IS NOT NULL AND oldest < clock_timestamp() - backlog_bound::interval THEN
            RAISE EXCEPTION 'the log is busy: the oldest unsequenced append waited since %', oldest
                USING ERRCODE = 'SB003',
                      DETAIL = extract(epoch FROM clock_timestamp() - oldest)::text;
        END IF;
    END IF;

    -- Parsed first: each event's stream and version, and each append's streams, written and
    -- guarded. A stream's events arrive together, so a new stream id starts a new stream,
    -- whose expected version is its first new version minus one.
    FOR a IN 1 .. append_count LOOP
        parts := string_to_array(documents[a], E'\n');
        IF coalesce(array_length(parts, 1), 0) = 0 OR array_length(parts, 1) % 2 <> 0 THEN
            RAISE EXCEPTION 'append_events needs prefix/suffix pairs, got % parts',
                coalesce(array_length(parts, 1), 0)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF responses[a] IS NOT NULL AND idempotency_keys[a] IS NULL THEN
            RAISE EXCEPTION 'append_events: a response is stored only with an idempotency key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        answers[a] := responses[a]::jsonb;
        events_here := array_length(parts, 1) / 2;
        event_start[a] := total + 1;
        event_count[a] := events_here;
        stream_start[a] := streams + 1;
        streams_here := 0;
        FOR k IN 1 .. events_here LOOP
            IF left(parts[2 * k], 16) <> ',"recorded_at":"' THEN
                RAISE EXCEPTION 'append_events: document % does not continue with recorded_at', k
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            total := total + 1;
            prefixes[total] := parts[2 * k - 1];
            suffixes[total] := parts[2 * k];
            -- The whole document is checked to be JSON here (as json: checked, not built), so
            -- that nothing the sequencer cannot parse ever reaches it; the stream and version
            -- come from the suffix alone ("recorded_at" to "version", a few dozen bytes).
            PERFORM (parts[2 * k - 1] || '0' || parts[2 * k])::json;
            document := ('{' || substr(parts[2 * k], 2))::jsonb;
            stream_id := document ->> 'stream_id';
            version := (document ->> 'version')::integer;
            event_streams[total] := stream_id;
            event_versions[total] := version;
            IF streams_here = 0 OR stream_id <> stream_ids[streams] THEN
                streams := streams + 1;
                streams_here := streams_here + 1;
                stream_ids[streams] := stream_id;
                expected_versions[streams] := version - 1;
                first_versions[streams] := version;
                new_versions[streams] := version;
                writes[streams] := true;
            ELSE
                new_versions[streams] := version;
            END IF;
        END LOOP;
        IF guards IS NOT NULL AND guards[a] IS NOT NULL THEN
            FOR guard IN
                SELECT g.value ->> 0 AS stream_id, (g.value ->> 1)::integer AS version
                FROM jsonb_array_elements(guards[a]::jsonb) WITH ORDINALITY AS g (value, n)
                ORDER BY g.n
            LOOP
                streams := streams + 1;
                streams_here := streams_here + 1;
                stream_ids[streams] := guard.stream_id;
                expected_versions[streams] := guard.version;
                first_versions[streams] := NULL;
                new_versions[streams] := guard.version;
                writes[streams] := false;
            END LOOP;
        END IF;
        stream_count[a] := streams_here;
    END LOOP;

    -- Sized now: an element assigned first past the end of an empty array would start it at
    -- that subscript, and the arrays must line up with event_streams for the insert.
    taken := array_fill(false, ARRAY[total]);
    event_append_ids := array_fill(NULL::bigint, ARRAY[total]);
    event_n := array_fill(NULL::integer, ARRAY[total]);

    SELECT array_agg(DISTINCT w.s ORDER BY w.s),
           coalesce(array_agg(DISTINCT w.s ORDER BY w.s) FILTER (WHERE w.is_written), '{}')
    INTO locked, written
    FROM unnest(stream_ids, writes) AS w (s, is_written);

    -- A stream with no head row yet (a new stream, or a guard on a stream never written) gets
    -- one at version 0 first, so that there is a row to lock: inserted in sorted order, and
    -- before any lock is taken (a row another append is inserting is waited for here, holding
    -- only rows this one inserted, which sort before it), so the order of every wait stays
    -- the sorted one. For a stream that has its row, an index probe and nothing written.
    INSERT INTO public.stream_heads (stream_id, version)
    SELECT l.s, 0 FROM unnest(locked) AS l (s) ORDER BY l.s
    ON CONFLICT DO NOTHING;

    -- The row locks, in sorted order, held to the commit, so the versions read here are the
    -- versions the batch's events follow: FOR UPDATE where any append of the batch writes
    -- the stream, FOR SHARE where it is only guarded (guards of one stream do not wait for
    -- each other). One statement takes them all: its scalar subqueries run row by row in the
    -- order of the sorted array (the aggregate sorts what they returned, after).
    SELECT array_agg(CASE WHEN l.s = ANY (written)
                          THEN (SELECT h.version FROM public.stream_heads AS h
                                WHERE h.stream_id = l.s FOR UPDATE)
                          ELSE (SELECT h.version FROM public.stream_heads AS h
                                WHERE h.stream_id = l.s FOR SHARE) END
                     ORDER BY l.k)
    INTO locked_versions
    FROM unnest(locked) WITH ORDINALITY AS l (s, k);
    IF array_position(locked_versions, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'append_batch: a stream head is missing after it was inserted';
    END IF;

    FOR a IN 1 .. append_count LOOP
        append_id := NULL;
        replayed_result := NULL;
        replayed_response := NULL;
        error_code := NULL;
        error_detail := NULL;
        this_key := idempotency_keys[a];

        -- The first stream (in append order) whose version is not the expected one.
        conflict_at := NULL;
        FOR s IN stream_start[a] .. stream_start[a] + stream_count[a] - 1 LOOP
            actual := locked_versions[array_position(locked, stream_ids[s])];
            IF actual <> expected_versions[s] THEN
                conflict_at := s;
                EXIT;
            END IF;
        END LOOP;

        -- A key is looked up only when the versions are stale (a replay's streams have moved
        -- on since it first ran, so a replay is always stale: its first run's events are
        -- there) or when recording it finds it taken: a fresh append, the usual case, never
        -- reads it. After the locks: a twin holding this key held its streams too, so it has
        -- committed by now and its key is seen.
        IF conflict_at IS NOT NULL THEN
            IF this_key IS NOT NULL THEN
                SELECT k.fingerprint, k.result, r.response INTO stored
                    FROM public.idempotency_keys AS k
                    LEFT JOIN public.idempotency_responses AS r ON r.key = k.key
                    WHERE k.key = this_key;
                IF FOUND THEN
                    IF stored.fingerprint <> request_fingerprints[a] THEN
                        error_code := 'SB002';
                    ELSE
                        replayed_result := stored.result::text;
                        replayed_response := stored.response::text;
                    END IF;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            error_code := 'SB001';
            error_detail := json_build_object('stream_id', stream_ids[conflict_at],
                                              'expected', expected_versions[conflict_at],
                                              'actual', actual)::text;
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- In the same transaction as the events: the key is spent exactly when they commit,
        -- and never without its answer. Key and response in one statement; a key already
        -- taken (a replay whose versions still matched, or a twin of another request that
        -- committed it meanwhile) makes this a replay or a refusal.
        IF this_key IS NOT NULL THEN
            WITH new_key AS (
                INSERT INTO public.idempotency_keys (key, fingerprint, result, recorded_at)
                SELECT this_key, request_fingerprints[a], jsonb_build_object(
                    'versions', (
                        SELECT jsonb_object_agg(v.stream_id, v.version)
                        FROM unnest(stream_ids[stream_start[a] : stream_start[a] + stream_count[a] - 1],
                                    new_versions[stream_start[a] : stream_start[a] + stream_count[a] - 1])
                             AS v (stream_id, version)),
                    'appended', (
                        SELECT jsonb_agg(jsonb_build_array(v.stream_id, v.first_version,
                                                           v.last_version) ORDER BY v.n)
                        FROM unnest(stream_ids[stream_start[a] : stream_start[a] + stream_count[a] - 1],
                                    first_versions[stream_start[a] : stream_start[a] + stream_count[a] - 1],
                                    new_versions[stream_start[a] : stream_start[a] + stream_count[a] - 1])
                             WITH ORDINALITY AS v (stream_id, first_version, last_version, n)
                        WHERE v.first_version IS NOT NULL)),
                    (('{' || substr(suffixes[event_start[a]], 2))::jsonb
                     ->> 'recorded_at')::timestamptz
                ON CONFLICT (key) DO NOTHING
                RETURNING key, recorded_at
            ), new_response AS (
                INSERT INTO public.idempotency_responses (key, response, recorded_at)
                SELECT n.key, answers[a], n.recorded_at FROM new_key AS n
                WHERE answers[a] IS NOT NULL
            )
            SELECT count(*) INTO recorded_keys FROM new_key;
            IF recorded_keys = 0 THEN
                SELECT k.fingerprint, k.result, r.response INTO stored
                    FROM public.idempotency_keys AS k
                    LEFT JOIN public.idempotency_responses AS r ON r.key = k.key
                    WHERE k.key = this_key;
                IF stored.fingerprint <> request_fingerprints[a] THEN
                    error_code := 'SB002';
                ELSE
                    replayed_result := stored.result::text;
                    replayed_response := stored.response::text;
                END IF;
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;

        -- Drawn now, with every lock of the batch held: see append_order above. The events
        -- are inserted once for the whole batch, below.
        append_id := nextval('public.append_order');
        FOR k IN event_start[a] .. event_start[a] + event_count[a] - 1 LOOP
            event_append_ids[k] := append_id;
            event_n[k] := k - event_start[a] + 1;
            taken[k] := true;
        END LOOP;

        FOR s IN stream_start[a] .. stream_start[a] + stream_count[a] - 1 LOOP
            IF writes[s] THEN
                locked_versions[array_position(locked, stream_ids[s])] := new_versions[s];
            END IF;
        END LOOP;
        appended := true;
        RETURN NEXT;
    END LOOP;

    IF appended THEN
        INSERT INTO public.unsequenced_events (append_id, n, stream_id, version, prefix, suffix)
        SELECT e.append_id, e.n, e.stream_id, e.version, e.prefix, e.suffix
        FROM unnest(event_append_ids, event_n, event_streams, event_versions, prefixes, suffixes,
                    taken) AS e (append_id, n, stream_id, version, prefix, suffix, taken)
        WHERE e.taken;
        UPDATE public.stream_heads AS h SET version = v.version
        FROM unnest(locked, locked_versions) AS v (stream_id, version)
        WHERE h.stream_id = v.stream_id AND v.stream_id = ANY (written)
          AND h.version <> v.version;
        -- No NOTIFY to wake the sequencer: a transaction that notifies takes a database-wide
        -- lock at its commit and holds it through the flush (PostgreSQL serialises the notify
        -- queue's writers), which would make every append wait for every other's flush
        -- again. The sequencer polls instead (events/sequencer.py).
    END IF;
END
$$;

REVOKE ALL ON FUNCTION append_batch(text[], text[], text[], text[], text[], text, text)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_batch(text[], text[], text[], text[], text[], text, text)
    TO shoebox_app;

-- The sequencer's one step: move up to max_appends committed appends, oldest first in
-- append_order, into events, in one transaction. Only this function writes events.
--
-- It takes the sequencer's advisory lock for the transaction first (the process that holds
-- the sequencer's role holds the same lock for its session, and a lock a session holds is
-- granted again to it at once), so two callers never run a batch at the same time, and reads
-- the head after the lock is granted: two sequencers racing can never both give out a
-- position, and the primary key on position refuses it if they somehow did. With wait false
-- it returns -1 at once when another session holds the lock.
--
-- The hash: SHA-256(prev_hash || prefix || position || suffix), as events/canonical.py and
-- 0002..0014 compute it, over the bytes the append was sent with; where recorded_at must be
-- raised to the head's (an append stamped by its own clock before another that was
-- sequenced first), the suffix's fixed-width time is rewritten first, as 0004 did.
CREATE FUNCTION sequence_appends(
    max_appends integer,
    wait boolean,
    OUT sequenced integer,
    OUT last_position bigint,
    OUT oldest_wait double precision
)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public SET plan_cache_mode = force_generic_plan
-- Every statement here has an index to go through (the queue's primary key, events' by
-- position): a generic plan over a queue the statistics call tiny would scan it whole.
SET enable_seqscan = off AS $$
DECLARE
    head_position bigint;
    head_hash text;
    floor_at timestamptz;
    supplied_at timestamptz;
    recorded text;
    link text;
    ids bigint[];
    oldest_queued_at timestamptz;
    prefixes text[];
    suffixes text[];
    parsed jsonb[];
    hashes text[];
    n_events integer;
    last_id bigint;
BEGIN
    sequenced := 0;
    IF wait THEN
        PERFORM pg_advisory_xact_lock(hashtext('shoebox_sequencer'));
    ELSIF NOT pg_try_advisory_xact_lock(hashtext('shoebox_sequencer')) THEN
        sequenced := -1;
        RETURN;
    END IF;

    -- The batch's last append: the max_appends-th oldest, through the primary key alone. An
    -- empty poll (the usual one when idle) ends here, before reading the head.
    SELECT max(p.append_id) INTO last_id
    FROM (SELECT DISTINCT q.append_id FROM public.unsequenced_events AS q
          ORDER BY q.append_id LIMIT max_appends) AS p;
    IF last_id IS NULL THEN
        SELECT h.position INTO last_position
        FROM public.events AS h ORDER BY h.position DESC LIMIT 1;
        last_position := coalesce(last_position, 0);
        RETURN;
    END IF;

    SELECT h.position, h.hash, h.recorded_at INTO head_position, head_hash, floor_at
    FROM public.events AS h ORDER BY h.position DESC LIMIT 1;
    head_position := coalesce(head_position, 0);
    head_hash := coalesce(head_hash, repeat('0', 64));
    last_position := head_position;

    -- Whole appends, in append order, each append's events in its own order: a range of the
    -- primary key from its start, so an index scan that stops at last_id, never a scan of the
    -- queue's dead rows (seq scans are off for this function: the queue is small to the
    -- planner's eye, and mostly rows deleted since the last vacuum to the disk's). Every append
    -- here has committed (its row is visible); one that commits after this statement is found
    -- by a later batch, and one below last_id that became visible since the statement above is
    -- simply taken now, whole (an append's rows commit together). Within a stream,
    -- append_order follows commit order (see append_order).
    SELECT array_agg(u.append_id ORDER BY u.append_id, u.n),
           array_agg(u.prefix ORDER BY u.append_id, u.n),
           array_agg(u.suffix ORDER BY u.append_id, u.n),
           min(u.queued_at)
    INTO ids, prefixes, suffixes, oldest_queued_at
    FROM public.unsequenced_events AS u
    WHERE u.append_id <= last_id;
    n_events := coalesce(array_length(ids, 1), 0);
    IF n_events = 0 THEN
        RETURN;
    END IF;

    parsed := '{}';
    hashes := '{}';
    link := head_hash;
    FOR i IN 1 .. n_events LOOP
        parsed[i] := (prefixes[i] || '0' || suffixes[i])::jsonb;
        supplied_at := (parsed[i] ->> 'recorded_at')::timestamptz;
        IF floor_at IS NOT NULL AND supplied_at < floor_at THEN
            recorded := to_char(floor_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
            suffixes[i] := overlay(suffixes[i] PLACING recorded FROM 17 FOR 27);
            parsed[i] := jsonb_set(parsed[i], '{recorded_at}', to_jsonb(recorded));
        ELSE
            floor_at := supplied_at;
        END IF;
        link := encode(sha256(convert_to(
            link || prefixes[i] || (head_position + i)::text || suffixes[i], 'UTF8')), 'hex');
        hashes[i] := link;
    END LOOP;

    INSERT INTO public.events (position, stream_id, category, version, type, schema_version,
                               payload, metadata, recorded_at, prev_hash, hash)
    SELECT head_position + u.n, u.d ->> 'stream_id', u.d ->> 'category',
           (u.d ->> 'version')::integer, u.d ->> 'type', (u.d ->> 'schema_version')::integer,
           u.d -> 'payload', u.d -> 'metadata', (u.d ->> 'recorded_at')::timestamptz,
           coalesce(hashes[u.n - 1], head_hash), hashes[u.n]
    FROM unnest(parsed) WITH ORDINALITY AS u (d, n);

    DELETE FROM public.unsequenced_events AS u WHERE u.append_id <= last_id AND u.append_id = ANY (ids);

    sequenced := n_events;
    last_position := head_position + n_events;
    -- How long the oldest append of the batch waited for its position (to the server's
    -- clock, before this commit): the sequencer's lag, for its metric.
    oldest_wait := extract(epoch FROM clock_timestamp() - oldest_queued_at);
    PERFORM pg_notify('shoebox_events', last_position::text);
END
$$;

REVOKE ALL ON FUNCTION sequence_appends(integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sequence_appends(integer, boolean) TO shoebox_app;

-- Commands load a stream by version from both tables (events/postgres.py); the sequencer's
-- lag is read from this one too. Nothing else: the application writes it only through
-- append_batch().
REVOKE ALL ON stream_heads, unsequenced_events FROM PUBLIC;
GRANT SELECT ON unsequenced_events TO shoebox_app;
