-- A bet in one round trip: the append also stores the response to its idempotency key.
--
-- Until now a request with an Idempotency-Key cost three calls around its append: the key
-- looked up before the view, the append (which recorded the key and its append's result), and
-- the response stored after the view, in a second durable commit. Between the last two, a
-- crash left a key whose events were in the log and whose answer was not (the 409
-- idempotency-key-in-progress a retry then met).
--
-- append_events() now takes the response as its fourth argument and stores it in the same
-- transaction as the events and the key, so that the events, the key and the answer commit
-- together or not at all. A key already used answers its stored result and its stored
-- response (NULL for a key whose first request stored none, as before this migration), so
-- the caller can append straight away, without looking the key up first: a replay costs the
-- same one call.
--
-- The three-argument function stays, as a call of this one with no response, so there is one
-- implementation of the append: one lock, one position sequence, one hash chain.
--
-- Everything else is 0004's function unchanged.
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
LANGUAGE plpgsql SECURITY DEFINER
-- Generic plans: the statements below have the same shape on every call, and planning them
-- afresh each time (plpgsql's first choice) cost more than running them.
SET search_path = pg_catalog, public SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    parts text[] := string_to_array(documents, E'\n');
    event_count constant integer := coalesce(array_length(parts, 1), 0) / 2;
    parsed jsonb[];
    hashes text[];
    stream_ids text[];
    expected_versions integer[];
    new_versions integer[];
    stream_id text;
    version integer;
    head_position bigint;
    head_hash text;
    head_recorded_at timestamptz;
    floor_at timestamptz;
    supplied_at timestamptz;
    recorded text;
    link text;
    stored record;
    stored_response jsonb;
    conflict record;
BEGIN
    IF event_count = 0 OR array_length(parts, 1) % 2 <> 0 THEN
        RAISE EXCEPTION 'append_events needs prefix/suffix pairs, got % parts',
            coalesce(array_length(parts, 1), 0)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF response IS NOT NULL AND idempotency_key IS NULL THEN
        RAISE EXCEPTION 'append_events: a response is stored only with an idempotency key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Parsed before the lock: a response that is not JSON fails here, having waited for
    -- nothing.
    stored_response := response::jsonb;
    -- Parsed before the lock, to keep the serial section short. The position (unknown yet)
    -- is written as 0 here; the column comes from the head below, and only the hash needs
    -- the real digits. A stream's events arrive together, so a new stream id starts a new
    -- stream, whose expected version is its first new version minus one. (A client that
    -- split a stream would see its second part conflict, never a gap.)
    FOR i IN 1 .. event_count LOOP
        parsed[i] := (parts[2 * i - 1] || '0' || parts[2 * i])::jsonb;
        stream_id := parsed[i] ->> 'stream_id';
        version := (parsed[i] ->> 'version')::integer;
        IF i = 1 OR stream_id <> stream_ids[array_upper(stream_ids, 1)] THEN
            stream_ids := stream_ids || stream_id;
            expected_versions := expected_versions || (version - 1);
            new_versions := new_versions || version;
        ELSE
            new_versions[array_upper(new_versions, 1)] := version;
        END IF;
    END LOOP;

    -- Appends run one at a time, so positions commit in position order and a reader that
    -- has seen position p never finds a lower one committing later; it also serialises the
    -- hash chain, which needs the previous hash anyway. SELECT is not blocked. This function
    -- is SECURITY DEFINER because the lock needs a privilege the application role lacks.
    LOCK TABLE public.events IN EXCLUSIVE MODE;

    -- Under the lock, so that two appends racing with one key see each other. The key is
    -- looked up before the versions: a replay's streams have moved on since it first ran.
    IF idempotency_key IS NOT NULL THEN
        SELECT k.fingerprint, k.result, r.response INTO stored
            FROM public.idempotency_keys AS k
            LEFT JOIN public.idempotency_responses AS r ON r.key = k.key
            WHERE k.key = idempotency_key;
        IF FOUND THEN
            IF stored.fingerprint <> request_fingerprint THEN
                RAISE EXCEPTION 'idempotency key % was already used for a different request',
                    quote_literal(idempotency_key)
                    USING ERRCODE = 'SB002';
            END IF;
            replayed_result := stored.result::text;
            replayed_response := stored.response::text;
            RETURN;
        END IF;
    END IF;

    -- The head, and the first stream (in append order) whose newest version is not the
    -- expected one, in one statement: one index probe per stream, newest version first.
    -- Read after the lock is granted, in a fresh READ COMMITTED snapshot, so the head
    -- includes the last commit.
    SELECT head.position, head.hash, head.recorded_at, c.stream_id, c.expected, c.actual
    INTO conflict
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (
        SELECT e.position, e.hash, e.recorded_at
        FROM public.events AS e ORDER BY e.position DESC LIMIT 1
    ) AS head ON true
    LEFT JOIN LATERAL (
        SELECT s.stream_id, s.expected, coalesce(newest.version, 0) AS actual
        FROM unnest(stream_ids, expected_versions) WITH ORDINALITY AS s (stream_id, expected, n)
        LEFT JOIN LATERAL (
            SELECT e.version FROM public.events AS e
            WHERE e.stream_id = s.stream_id ORDER BY e.version DESC LIMIT 1
        ) AS newest ON true
        WHERE coalesce(newest.version, 0) <> s.expected
        ORDER BY s.n
        LIMIT 1
    ) AS c ON true;
    IF conflict.stream_id IS NOT NULL THEN
        RAISE EXCEPTION 'stream % is at version %, expected %',
            quote_literal(conflict.stream_id), conflict.actual, conflict.expected
            USING ERRCODE = 'SB001',
                  DETAIL = json_build_object('stream_id', conflict.stream_id,
                                             'expected', conflict.expected,
                                             'actual', conflict.actual)::text;
    END IF;
    head_position := coalesce(conflict.position, 0);
    head_hash := coalesce(conflict.hash, repeat('0', 64));
    head_recorded_at := conflict.recorded_at;

    -- Never before the head, nor before the event just before in this append. The suffix's
    -- time is replaced only when it moves, so an append in order hashes the bytes it was sent.
    floor_at := head_recorded_at;
    FOR i IN 1 .. event_count LOOP
        IF left(parts[2 * i], 16) <> ',"recorded_at":"' THEN
            RAISE EXCEPTION 'append_events: document % does not continue with recorded_at', i
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        supplied_at := (parsed[i] ->> 'recorded_at')::timestamptz;
        IF floor_at IS NOT NULL AND supplied_at < floor_at THEN
            recorded := to_char(floor_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
            parts[2 * i] := overlay(parts[2 * i] PLACING recorded FROM 17 FOR 27);
            parsed[i] := jsonb_set(parsed[i], '{recorded_at}', to_jsonb(recorded));
        ELSE
            floor_at := supplied_at;
        END IF;
    END LOOP;

    -- hash(n) = SHA-256(prev_hash || canonical document), as events/canonical.py computes it.
    -- convert_to: the canonical bytes are UTF-8 whatever the database's encoding is.
    link := head_hash;
    FOR i IN 1 .. event_count LOOP
        link := encode(sha256(convert_to(
            link || parts[2 * i - 1] || (head_position + i)::text || parts[2 * i], 'UTF8')), 'hex');
        hashes[i] := link;
    END LOOP;

    INSERT INTO public.events (position, stream_id, category, version, type, schema_version,
                               payload, metadata, recorded_at, prev_hash, hash)
    SELECT head_position + u.n, u.d ->> 'stream_id', u.d ->> 'category',
           (u.d ->> 'version')::integer, u.d ->> 'type', (u.d ->> 'schema_version')::integer,
           u.d -> 'payload', u.d -> 'metadata', (u.d ->> 'recorded_at')::timestamptz,
           coalesce(hashes[u.n - 1], head_hash), hashes[u.n]
    FROM unnest(parsed) WITH ORDINALITY AS u (d, n);

    first_position := head_position + 1;
    last_position := head_position + event_count;

    -- In the same transaction as the events: the key is spent exactly when they commit.
    IF idempotency_key IS NOT NULL THEN
        INSERT INTO public.idempotency_keys (key, fingerprint, result, recorded_at)
        SELECT idempotency_key, request_fingerprint,
               jsonb_build_object('first_position', first_position,
                                  'last_position', last_position,
                                  'versions', jsonb_object_agg(v.stream_id, v.version)),
               (parsed[1] ->> 'recorded_at')::timestamptz
        FROM unnest(stream_ids, new_versions) AS v (stream_id, version);
        -- The answer, in the same transaction: no commit ever holds the key without it.
        IF stored_response IS NOT NULL THEN
            INSERT INTO public.idempotency_responses (key, response, recorded_at)
            VALUES (idempotency_key, stored_response, (parsed[1] ->> 'recorded_at')::timestamptz);
        END IF;
    END IF;

    PERFORM pg_notify('shoebox_events', last_position::text);
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
