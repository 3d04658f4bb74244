-- Two guards on the log, both about appending only through append_events():
--   1. recorded_at never decreases along the log (the function, replaced below);
--   2. the application role appends only through the function (the grants, at the end).
--
-- 1. recorded_at never decreases along the log.
--
-- The client stamps recorded_at from its clock before it asks for the lock, so an append that
-- waited behind another could land after it with an earlier time, and a clock stepped back
-- (NTP, a VM resumed) did the same: the log ran backwards in time, and "what happened before
-- 16:00" stopped meaning "the events before some position". Under the lock, the function now
-- records max(the supplied time, the head's recorded_at) (and, within one append, never less
-- than the event before). The injected clock stays the only source of time: the database's
-- own clock is never read, so tests and replays that set the clock still get their times.
--
-- The time is part of the hashed document, so where it moves the function rewrites it in the
-- document's suffix too (suffix(n) starts with ,"recorded_at":"YYYY-MM-DDTHH:MM:SS.ffffffZ",
-- a fixed 27 characters at a fixed offset) before hashing: a row, its hash and its document
-- still agree, and a verifier sees nothing new. Everything else is 0002's function unchanged.
CREATE OR REPLACE FUNCTION append_events(
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
    END IF;

    PERFORM pg_notify('shoebox_events', last_position::text);
END
$$;

REVOKE ALL ON FUNCTION append_events(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION append_events(text, text, text) TO shoebox_app;


-- 2. The application role appends only through append_events().
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
