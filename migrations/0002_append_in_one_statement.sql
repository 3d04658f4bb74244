-- The whole append as one server-side function, so that an append is one statement, one
-- round trip and one transaction, and the table lock is never held across the network.
-- 0001's lock_events_for_append() stays: a hand-written append (tests hold one open) may
-- still use it, and the two take the same lock, so they serialise with each other.
--
-- The client cannot know an event's position before the lock is granted, so it sends each
-- event's canonical document (docs/audit-log.md) cut in two where the position goes: sorted
-- keys put "position" between "payload" and "recorded_at". `documents` is
--
--     prefix(1) LF suffix(1) LF prefix(2) LF suffix(2) ...
--
-- with prefix(n) ending in `"position":` and suffix(n) starting with `,"recorded_at":`.
-- A line feed can separate them because canonical JSON never holds a raw control character
-- (they are escaped inside strings and there is no whitespace outside them).
--
-- Every column is read back from the very document that is hashed, so a row and its hash
-- cannot disagree.
--
-- Errors the client maps to typed exceptions (class SB is implementation-defined and unused
-- by PostgreSQL):
--   SB001  a stream is not at its expected version; DETAIL is the JSON object
--          {"stream_id": ..., "expected": ..., "actual": ...}  -> ConcurrencyConflict
--   SB002  the idempotency key was used with another fingerprint -> IdempotencyKeyReused
CREATE FUNCTION append_events(
    documents text,
    idempotency_key text,
    request_fingerprint text,
    OUT first_position bigint,
    OUT last_position bigint,
    OUT replayed_result text
)
LANGUAGE plpgsql SECURITY DEFINER
-- Generic plans: the statements below have the same shape on every call, and planning them
-- afresh each time (plpgsql's first choice) cost more than running them.
SET search_path = pg_catalog, public SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    parts constant text[] := string_to_array(documents, E'\n');
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
    link text;
    stored record;
    conflict record;
BEGIN
    IF event_count = 0 OR array_length(parts, 1) % 2 <> 0 THEN
        RAISE EXCEPTION 'append_events needs prefix/suffix pairs, got % parts',
            coalesce(array_length(parts, 1), 0)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
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
        SELECT k.fingerprint, k.result INTO stored
            FROM public.idempotency_keys AS k WHERE k.key = idempotency_key;
        IF FOUND THEN
            IF stored.fingerprint <> request_fingerprint THEN
                RAISE EXCEPTION 'idempotency key % was already used for a different request',
                    quote_literal(idempotency_key)
                    USING ERRCODE = 'SB002';
            END IF;
            replayed_result := stored.result::text;
            RETURN;
        END IF;
    END IF;

    -- The head, and the first stream (in append order) whose newest version is not the
    -- expected one, in one statement: one index probe per stream, newest version first.
    -- Read after the lock is granted, in a fresh READ COMMITTED snapshot, so the head
    -- includes the last commit.
    SELECT head.position, head.hash, c.stream_id, c.expected, c.actual INTO conflict
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (
        SELECT e.position, e.hash FROM public.events AS e ORDER BY e.position DESC LIMIT 1
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
    END IF;

    PERFORM pg_notify('shoebox_events', last_position::text);
END
$$;

REVOKE ALL ON FUNCTION append_events(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_events(text, text, text) TO shoebox_app;
