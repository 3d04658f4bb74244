-- Two changes to the append, both about what one call to the database can do.
--
-- 1. The answer to an idempotency key is stored by the append itself.
--
-- Until now a request with an Idempotency-Key cost three calls around its append: the key
-- looked up before the view, the append (which recorded the key and its append's result), and
-- the response stored after the view, in a second durable commit. Between the last two, a
-- crash left a key whose events were in the log and whose answer was not (the 409
-- idempotency-key-in-progress a retry then met). Now the append takes the response and stores
-- it in the same transaction as the events and the key: the events, the key and the answer
-- commit together or not at all. A key already used answers its stored result and its stored
-- response (NULL for a key whose first request stored none, before this migration), so the
-- caller appends straight away, without looking the key up first.
--
-- 2. Several appends in one transaction (group commit).
--
-- The log's lock is held until the commit, and the commit waits for its WAL to reach the
-- disk, so appends ran at one per disk flush whatever the number of tables writing
-- (docs/scaling.md). append_batch() takes the lock once for any number of appends, each
-- checked, numbered and chained after the one before it exactly as a lone append would be,
-- and commits them with one flush. An append that is refused (a stale version, a key reused
-- for another request) is reported in its row and skipped; the others are recorded. The
-- client batches the appends that arrive while its previous call is in flight
-- (events/postgres.py), so a lone append waits for nothing.
--
-- One implementation: append_events() with four arguments is append_batch() of one append,
-- raising what the batch reports; with three, it is that with no response. One lock, one
-- position sequence, one hash chain.
--
-- Documents are cut as in 0002 (prefix LF suffix LF ... with the position between), and the
-- time is kept from running backwards as in 0004. Error codes reported per append:
--   SB001  a stream is not at its expected version; detail is the JSON object
--          {"stream_id": ..., "expected": ..., "actual": ...}
--   SB002  the idempotency key was used with another fingerprint
CREATE FUNCTION append_batch(
    documents text[],
    idempotency_keys text[],
    request_fingerprints text[],
    responses text[]
)
RETURNS TABLE (
    first_position bigint,
    last_position bigint,
    replayed_result text,
    replayed_response text,
    error_code text,
    error_detail text
)
LANGUAGE plpgsql SECURITY DEFINER
-- Generic plans: the statements below have the same shape on every call, and planning them
-- afresh each time (plpgsql's first choice) cost more than running them.
SET search_path = pg_catalog, public SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    append_count constant integer := coalesce(array_length(documents, 1), 0);
    parts text[];
    -- Every append's events, flattened: prefixes, suffixes, parsed documents, and where each
    -- append's events and streams start in these arrays, and how many it has.
    prefixes text[] := '{}';
    suffixes text[] := '{}';
    parsed jsonb[] := '{}';
    event_start integer[] := '{}';
    event_count integer[] := '{}';
    stream_ids text[] := '{}';
    expected_versions integer[] := '{}';
    new_versions integer[] := '{}';
    stream_start integer[] := '{}';
    stream_count integer[] := '{}';
    answers jsonb[] := '{}';
    total integer := 0;
    streams integer := 0;
    events_here integer;
    streams_here integer;
    stream_id text;
    version integer;
    head_position bigint;
    head_hash text;
    head_recorded_at timestamptz;
    floor_at timestamptz;
    supplied_at timestamptz;
    recorded text;
    link text;
    hashes text[];
    this_key text;
    stored record;
    conflict record;
    e integer;
    appended boolean := false;
BEGIN
    IF append_count = 0 THEN
        RETURN;
    END IF;
    IF coalesce(array_length(idempotency_keys, 1), 0) <> append_count
       OR coalesce(array_length(request_fingerprints, 1), 0) <> append_count
       OR coalesce(array_length(responses, 1), 0) <> append_count THEN
        RAISE EXCEPTION 'append_batch needs a key, a fingerprint and a response per append'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Parsed before the lock, to keep the serial section short. The position (unknown yet)
    -- is written as 0 here; the column comes from the head below, and only the hash needs
    -- the real digits. A stream's events arrive together, so a new stream id starts a new
    -- stream, whose expected version is its first new version minus one. (A client that
    -- split a stream would see its second part conflict, never a gap.)
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
        FOR i IN 1 .. events_here LOOP
            IF left(parts[2 * i], 16) <> ',"recorded_at":"' THEN
                RAISE EXCEPTION 'append_events: document % does not continue with recorded_at', i
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            total := total + 1;
            prefixes[total] := parts[2 * i - 1];
            suffixes[total] := parts[2 * i];
            parsed[total] := (parts[2 * i - 1] || '0' || parts[2 * i])::jsonb;
            stream_id := parsed[total] ->> 'stream_id';
            version := (parsed[total] ->> 'version')::integer;
            IF streams_here = 0 OR stream_id <> stream_ids[streams] THEN
                streams := streams + 1;
                streams_here := streams_here + 1;
                stream_ids[streams] := stream_id;
                expected_versions[streams] := version - 1;
                new_versions[streams] := version;
            ELSE
                new_versions[streams] := version;
            END IF;
        END LOOP;
        stream_count[a] := streams_here;
    END LOOP;

    -- Appends run one at a time, so positions commit in position order and a reader that
    -- has seen position p never finds a lower one committing later; it also serialises the
    -- hash chain, which needs the previous hash anyway. SELECT is not blocked. This function
    -- is SECURITY DEFINER because the lock needs a privilege the application role lacks.
    -- Taken once for the whole batch: what it costs, and the commit's flush after it, are
    -- shared by every append in the batch.
    LOCK TABLE public.events IN EXCLUSIVE MODE;

    -- Read after the lock is granted, in a fresh READ COMMITTED snapshot, so the head
    -- includes the last commit; from then on this function moves the head itself.
    SELECT h.position, h.hash, h.recorded_at INTO head_position, head_hash, head_recorded_at
    FROM public.events AS h ORDER BY h.position DESC LIMIT 1;
    head_position := coalesce(head_position, 0);
    head_hash := coalesce(head_hash, repeat('0', 64));

    FOR a IN 1 .. append_count LOOP
        first_position := NULL;
        last_position := NULL;
        replayed_result := NULL;
        replayed_response := NULL;
        error_code := NULL;
        error_detail := NULL;
        this_key := idempotency_keys[a];

        -- Under the lock, so that two appends racing with one key see each other (and an
        -- earlier append of this batch is seen by a later one: same transaction). The key is
        -- looked up before the versions: a replay's streams have moved on since it first ran.
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

        -- The first stream (in append order) whose newest version is not the expected one:
        -- one index probe per stream, newest version first. Sees this batch's own inserts.
        SELECT s.stream_id, s.expected, coalesce(newest.version, 0) AS actual INTO conflict
        FROM unnest(stream_ids[stream_start[a] : stream_start[a] + stream_count[a] - 1],
                    expected_versions[stream_start[a] : stream_start[a] + stream_count[a] - 1])
             WITH ORDINALITY AS s (stream_id, expected, n)
        LEFT JOIN LATERAL (
            SELECT v.version FROM public.events AS v
            WHERE v.stream_id = s.stream_id ORDER BY v.version DESC LIMIT 1
        ) AS newest ON true
        WHERE coalesce(newest.version, 0) <> s.expected
        ORDER BY s.n
        LIMIT 1;
        IF FOUND THEN
            error_code := 'SB001';
            error_detail := json_build_object('stream_id', conflict.stream_id,
                                              'expected', conflict.expected,
                                              'actual', conflict.actual)::text;
            RETURN NEXT;
            CONTINUE;
        END IF;

        -- Never before the head, nor before the event just before in this append. The
        -- suffix's time is replaced only when it moves, so an append in order hashes the
        -- bytes it was sent.
        floor_at := head_recorded_at;
        FOR i IN event_start[a] .. event_start[a] + event_count[a] - 1 LOOP
            supplied_at := (parsed[i] ->> 'recorded_at')::timestamptz;
            IF floor_at IS NOT NULL AND supplied_at < floor_at THEN
                recorded := to_char(floor_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
                suffixes[i] := overlay(suffixes[i] PLACING recorded FROM 17 FOR 27);
                parsed[i] := jsonb_set(parsed[i], '{recorded_at}', to_jsonb(recorded));
            ELSE
                floor_at := supplied_at;
            END IF;
        END LOOP;

        -- hash(n) = SHA-256(prev_hash || canonical document), as events/canonical.py computes
        -- it. convert_to: the canonical bytes are UTF-8 whatever the database's encoding is.
        link := head_hash;
        hashes := '{}';
        FOR i IN 1 .. event_count[a] LOOP
            e := event_start[a] + i - 1;
            link := encode(sha256(convert_to(
                link || prefixes[e] || (head_position + i)::text || suffixes[e], 'UTF8')), 'hex');
            hashes[i] := link;
        END LOOP;

        INSERT INTO public.events (position, stream_id, category, version, type,
                                   schema_version, payload, metadata, recorded_at, prev_hash,
                                   hash)
        SELECT head_position + u.n, u.d ->> 'stream_id', u.d ->> 'category',
               (u.d ->> 'version')::integer, u.d ->> 'type', (u.d ->> 'schema_version')::integer,
               u.d -> 'payload', u.d -> 'metadata', (u.d ->> 'recorded_at')::timestamptz,
               coalesce(hashes[u.n - 1], head_hash), hashes[u.n]
        FROM unnest(parsed[event_start[a] : event_start[a] + event_count[a] - 1])
             WITH ORDINALITY AS u (d, n);

        first_position := head_position + 1;
        last_position := head_position + event_count[a];

        -- In the same transaction as the events: the key is spent exactly when they commit,
        -- and never without its answer.
        IF this_key IS NOT NULL THEN
            INSERT INTO public.idempotency_keys (key, fingerprint, result, recorded_at)
            SELECT this_key, request_fingerprints[a],
                   jsonb_build_object('first_position', first_position,
                                      'last_position', last_position,
                                      'versions', jsonb_object_agg(v.stream_id, v.version)),
                   (parsed[event_start[a]] ->> 'recorded_at')::timestamptz
            FROM unnest(stream_ids[stream_start[a] : stream_start[a] + stream_count[a] - 1],
                        new_versions[stream_start[a] : stream_start[a] + stream_count[a] - 1])
                 AS v (stream_id, version);
            IF answers[a] IS NOT NULL THEN
                INSERT INTO public.idempotency_responses (key, response, recorded_at)
                VALUES (this_key, answers[a],
                        (parsed[event_start[a]] ->> 'recorded_at')::timestamptz);
            END IF;
        END IF;

        head_position := last_position;
        head_hash := link;
        head_recorded_at := floor_at;
        appended := true;
        RETURN NEXT;
    END LOOP;

    IF appended THEN
        PERFORM pg_notify('shoebox_events', head_position::text);
    END IF;
END
$$;

REVOKE ALL ON FUNCTION append_batch(text[], text[], text[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_batch(text[], text[], text[], text[]) TO shoebox_app;

-- One append, raising what the batch reports for it (as 0002's function did).
CREATE FUNCTION append_events(
    documents text,
    idempotency_key text,
    request_fingerprint text,
    response text,
    OUT first_position bigint,
    OUT last_position bigint,
    OUT replayed_result text,
    OUT replayed_response text
)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    outcome record;
    detail jsonb;
BEGIN
    SELECT * INTO outcome FROM public.append_batch(
        ARRAY[documents], ARRAY[idempotency_key], ARRAY[request_fingerprint], ARRAY[response]);
    IF outcome.error_code = 'SB001' THEN
        detail := outcome.error_detail::jsonb;
        RAISE EXCEPTION 'stream % is at version %, expected %',
            quote_literal(detail ->> 'stream_id'), detail ->> 'actual', detail ->> 'expected'
            USING ERRCODE = 'SB001', DETAIL = outcome.error_detail;
    ELSIF outcome.error_code = 'SB002' THEN
        RAISE EXCEPTION 'idempotency key % was already used for a different request',
            quote_literal(idempotency_key)
            USING ERRCODE = 'SB002';
    END IF;
    first_position := outcome.first_position;
    last_position := outcome.last_position;
    replayed_result := outcome.replayed_result;
    replayed_response := outcome.replayed_response;
END
$$;

REVOKE ALL ON FUNCTION append_events(text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_events(text, text, text, text) TO shoebox_app;

-- The three-argument form, for callers with no response to store: the same append.
CREATE OR REPLACE FUNCTION append_events(
    documents text,
    idempotency_key text,
    request_fingerprint text,
    OUT first_position bigint,
    OUT last_position bigint,
    OUT replayed_result text
)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.first_position, a.last_position, a.replayed_result
    FROM public.append_events(documents, idempotency_key, request_fingerprint, NULL) AS a
$$;

REVOKE ALL ON FUNCTION append_events(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_events(text, text, text) TO shoebox_app;
