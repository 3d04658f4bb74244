-- An append checks its guards: the streams it names at a version without adding to them.
--
-- A command that decided on a stream it does not write to names that stream's version in its
-- append, with no events: a bet names the player's own limits (read from the process's cache
-- without a query), a chat post the table (so that a mute recorded meanwhile refuses it). The
-- store's contract refuses such an append when the guarded stream has moved on, and the
-- in-memory store did. PostgreSQL did not: since 0002 the append has been given only the new
-- events' documents, and a stream with no events left no document, so its version was never
-- checked. A bet placed through a worker whose cached limit was stale was recorded against a
-- limit the player had already lowered.
--
-- append_batch() now takes each append's guards, a JSON array of [stream_id, version] pairs
-- (NULL for none), and checks them with the append's other streams, under the log's lock and
-- in the same probe; a stale guard is the same SB001 refusal, naming the guarded stream. The
-- key's recorded result names the guarded versions too, as the in-memory store's does.
--
-- Everything else is 0011's append_batch(), with 0013's bound on the lock's wait as its last
-- argument. The earlier signatures stay, for callers that have no guards, as this one with
-- none: one implementation, one lock, one position sequence, one hash chain.
CREATE FUNCTION append_batch(
    documents text[],
    idempotency_keys text[],
    request_fingerprints text[],
    responses text[],
    guards text[],
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
    guard record;
    appended boolean := false;
BEGIN
    -- Local to the statement's transaction (autocommit): nothing outlives the append.
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
        -- The guards: streams this append names at a version without adding to them. They
        -- join the append's streams after its events' streams, so the one conflict check
        -- below refuses a stale guard as it refuses a stale stream, and the key's recorded
        -- versions name them as a lone append's result does.
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
                new_versions[streams] := guard.version;
            END LOOP;
        END IF;
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

REVOKE ALL ON FUNCTION append_batch(text[], text[], text[], text[], text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_batch(text[], text[], text[], text[], text[], text)
    TO shoebox_app;

-- 0011's and 0013's signatures: the same append, with no guards.
CREATE OR REPLACE FUNCTION append_batch(
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
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT * FROM public.append_batch(
        documents, idempotency_keys, request_fingerprints, responses, NULL, NULL)
$$;

CREATE OR REPLACE FUNCTION append_batch(
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
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT * FROM public.append_batch(
        documents, idempotency_keys, request_fingerprints, responses, NULL, wait_bound)
$$;
