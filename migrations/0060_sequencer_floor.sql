-- The sequencer keeps a floor under the queue's live appends (issue 22, its CPU).
--
-- The sequencer deletes every row it places, and until a vacuum visits unsequenced_events the
-- dead rows sit at the start of its primary key: every append's back-pressure probe and
-- every batch (an empty poll too) began its index scan there and walked them all. Autovacuum
-- visits a database at most once a minute (and not at all where it is off), so under load
-- that was tens of thousands of dead entries a probe: 0.3 ms of CPU at 100,000, on every
-- append and every poll, growing until the next vacuum (docs/benchmarks.md, issue 22).
--
-- The floor: every append_id at or below it has left the queue for good, so every read of
-- the queue by its primary key starts above it. Only the sequencer moves it, in its batch's
-- transaction (a batch rolled back moves nothing), and only past appends it knows ended:
--   * a mark is (mark_id, mark_xid): append_order's last value, read by a batch before its
--     transaction had an id, and that transaction's id, given out after the read. An append
--     draws its id after its own transaction's id was given out (append_batch() says so), so
--     every append numbered up to mark_id belongs to a transaction whose id is below
--     mark_xid;
--   * a later batch whose snapshot's xmin is above mark_xid therefore knows that every one
--     of those transactions has ended, committed (visible to it) or rolled back (never to
--     be seen): whatever of them is still in the queue, it sees, and it takes in append
--     order. Once it took every one up to mark_id (its batch was not full, or was full past
--     mark_id), the floor rises to mark_id and a new mark is set; else the floor rises to
--     the batch's last append and the mark stays.
-- A transaction anywhere in the cluster that stays open holds xmin back, and with it the
-- floor: the reads then walk more dead rows, as before this migration; nothing is skipped.
-- append_order must hand out its values one at a time (no CACHE above 1), so that its last
-- value bounds every value drawn so far: 0030 created it so.
CREATE TABLE sequencer_floor (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    floor_id bigint  NOT NULL CHECK (floor_id >= 0),
    mark_id  bigint  NOT NULL CHECK (mark_id >= 0),
    mark_xid xid8    NOT NULL
);
INSERT INTO sequencer_floor (floor_id, mark_id, mark_xid) VALUES (0, 0, '0');
REVOKE ALL ON sequencer_floor FROM PUBLIC;
-- Read by the backlog's gauge (events/sequencer.py); written only by sequence_appends().
GRANT SELECT ON sequencer_floor TO shoebox_app;

CREATE OR REPLACE FUNCTION append_batch(
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
    bound_set text;
    own_xid xid8;
BEGIN
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

    -- The bound on the wait for the rows' locks, set on this transaction, and back-pressure,
    -- in one statement (each statement of a function costs its executor's start and end,
    -- which were most of an append's server time). Back-pressure: through the primary key
    -- from the sequencer's floor (every append at or below it has left the queue for good),
    -- the oldest append still waiting: the dead rows below the floor, which a vacuum has not
    -- removed yet, are never walked.
    SELECT CASE WHEN wait_bound IS NOT NULL
                THEN set_config('lock_timeout', wait_bound, true) END,
           CASE WHEN backlog_bound IS NOT NULL
                THEN (SELECT u.queued_at FROM public.unsequenced_events AS u
                      WHERE u.append_id > (SELECT f.floor_id FROM public.sequencer_floor AS f)
                      ORDER BY u.append_id, u.n LIMIT 1) END
    INTO bound_set, oldest;
    IF backlog_bound IS NOT NULL THEN
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
            -- The whole document is checked to be JSON by the insert into the queue, below; the
            -- stream and version come from the suffix alone ("recorded_at" to "version", a few
            -- dozen bytes).
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

    -- A stream with no head row yet (a new stream, or a guard on a stream never written) gets
    -- one at version 0 first, so that there is a row to lock: inserted in sorted order, and
    -- before any lock is taken (a row another append is inserting is waited for here, holding
    -- only rows this one inserted, which sort before it), so the order of every wait stays
    -- the sorted one. For a stream that has its row, an index probe and nothing written.
    INSERT INTO public.stream_heads (stream_id, version)
    SELECT DISTINCT l.s, 0 FROM unnest(stream_ids) AS l (s) ORDER BY l.s
    ON CONFLICT DO NOTHING;

    -- The row locks, in sorted order, held to the commit, so the versions read here are the
    -- versions the batch's events follow: FOR UPDATE where any append of the batch writes
    -- the stream, FOR SHARE where it is only guarded (guards of one stream do not wait for
    -- each other). One statement takes them all, and lists the streams, sorted, and those
    -- written: its scalar subqueries run row by row in the order of the sorted streams (the
    -- aggregates sort what they returned, after).
    SELECT array_agg(l.s ORDER BY l.s),
           coalesce(array_agg(l.s ORDER BY l.s) FILTER (WHERE l.is_written), '{}'),
           array_agg(CASE WHEN l.is_written
                          THEN (SELECT h.version FROM public.stream_heads AS h
                                WHERE h.stream_id = l.s FOR UPDATE)
                          ELSE (SELECT h.version FROM public.stream_heads AS h
                                WHERE h.stream_id = l.s FOR SHARE) END
                     ORDER BY l.s)
    INTO locked, written, locked_versions
    FROM (SELECT w.s, bool_or(w.is_written) AS is_written
          FROM unnest(stream_ids, writes) AS w (s, is_written)
          GROUP BY w.s ORDER BY w.s) AS l;
    IF array_position(locked_versions, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'append_batch: a stream head is missing after it was inserted';
    END IF;
    -- The transaction has its id already (its row locks took one), so every append id below
    -- is drawn after its transaction's id was given out, which the sequencer's floor relies
    -- on (see the top of this file): said here, not assumed.
    own_xid := pg_current_xact_id();

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

        -- Drawn now, with every lock of the batch held: see append_order in 0030. The events
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
        -- The events and the heads' new versions in one statement. Each document queued is
        -- checked to be JSON on the way in (as json: checked, not built), so that nothing
        -- the sequencer cannot parse ever reaches it: a malformed one raises, and the whole
        -- call is refused. The heads go through the primary key, one probe a written stream
        -- (the generic plan of 0030's join of the arrays with the table was a hash join over
        -- a sequential scan of every head, all the log's streams, for each append).
        WITH queued AS (
            INSERT INTO public.unsequenced_events (append_id, n, stream_id, version, prefix,
                                                   suffix)
            SELECT e.append_id, e.n, e.stream_id, e.version, e.prefix, e.suffix
            FROM unnest(event_append_ids, event_n, event_streams, event_versions, prefixes,
                        suffixes, taken)
                 AS e (append_id, n, stream_id, version, prefix, suffix, taken)
            WHERE e.taken AND (e.prefix || '0' || e.suffix)::json IS NOT NULL
        )
        UPDATE public.stream_heads AS h
        SET version = locked_versions[array_position(locked, h.stream_id)]
        WHERE h.stream_id = ANY (written)
          AND h.version <> locked_versions[array_position(locked, h.stream_id)];
        -- No NOTIFY to wake the sequencer: a transaction that notifies takes a database-wide
        -- lock at its commit and holds it through the flush (PostgreSQL serialises the notify
        -- queue's writers), which would make every append wait for every other's flush
        -- again. The sequencer polls instead (events/sequencer.py).
    END IF;
END
$$;

-- The sequencer's step as 0030 built it, reading the queue from the floor up, and moving
-- the floor (see the top of this file). Otherwise unchanged: the same lock, order, hashes,
-- recorded_at and notification.
CREATE OR REPLACE FUNCTION sequence_appends(
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
    appends_found integer;
    floor_id bigint;
    mark_id bigint;
    mark_xid xid8;
    -- Every append up to this has ended (the mark has passed), or NULL.
    ended_to bigint;
    new_floor bigint;
    -- A new mark's id, read before this transaction has an id of its own, or NULL.
    next_mark bigint;
BEGIN
    sequenced := 0;
    IF wait THEN
        PERFORM pg_advisory_xact_lock(hashtext('shoebox_sequencer'));
    ELSIF NOT pg_try_advisory_xact_lock(hashtext('shoebox_sequencer')) THEN
        sequenced := -1;
        RETURN;
    END IF;

    SELECT f.floor_id, f.mark_id, f.mark_xid INTO floor_id, mark_id, mark_xid
    FROM public.sequencer_floor AS f WHERE f.only_row;
    -- Before the reads of the queue below, whose snapshots are later than this one.
    IF pg_snapshot_xmin(pg_current_snapshot()) > mark_xid THEN
        ended_to := mark_id;
    END IF;
    -- Read while this transaction has no id (a caller's open transaction may have one):
    -- the id it takes later, when it writes, is then above every id handed out before.
    IF pg_current_xact_id_if_assigned() IS NULL THEN
        next_mark := coalesce(pg_sequence_last_value('public.append_order'), 0);
    END IF;

    -- The batch's last append: the max_appends-th oldest above the floor, through the
    -- primary key alone.
    SELECT max(p.append_id), count(*) INTO last_id, appends_found
    FROM (SELECT DISTINCT q.append_id FROM public.unsequenced_events AS q
          WHERE q.append_id > floor_id
          ORDER BY q.append_id LIMIT max_appends) AS p;

    -- Where the floor may go once this batch commits: see the top of this file.
    new_floor := floor_id;
    IF ended_to IS NOT NULL THEN
        IF appends_found < max_appends THEN
            new_floor := greatest(floor_id, ended_to);
        ELSE
            new_floor := greatest(floor_id, least(ended_to, last_id));
        END IF;
    END IF;
    IF new_floor >= mark_id AND ended_to IS NOT NULL AND next_mark IS NOT NULL
       AND next_mark > mark_id THEN
        -- This transaction's id, given out now if it had none: after next_mark was read.
        UPDATE public.sequencer_floor AS f
        SET floor_id = new_floor, mark_id = next_mark, mark_xid = pg_current_xact_id()
        WHERE f.only_row;
    ELSIF new_floor > floor_id THEN
        UPDATE public.sequencer_floor AS f SET floor_id = new_floor WHERE f.only_row;
    END IF;

    -- An empty poll (the usual one when idle) ends here, before reading the head.
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
    -- primary key from the floor to last_id (0030 says why every append here has committed,
    -- and why one that becomes visible meanwhile is simply taken whole).
    SELECT array_agg(u.append_id ORDER BY u.append_id, u.n),
           array_agg(u.prefix ORDER BY u.append_id, u.n),
           array_agg(u.suffix ORDER BY u.append_id, u.n),
           min(u.queued_at)
    INTO ids, prefixes, suffixes, oldest_queued_at
    FROM public.unsequenced_events AS u
    WHERE u.append_id > floor_id AND u.append_id <= last_id;
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

    DELETE FROM public.unsequenced_events AS u
    WHERE u.append_id > floor_id AND u.append_id <= last_id AND u.append_id = ANY (ids);

    sequenced := n_events;
    last_position := head_position + n_events;
    oldest_wait := extract(epoch FROM clock_timestamp() - oldest_queued_at);
    PERFORM pg_notify('shoebox_events', last_position::text);
END
$$;
