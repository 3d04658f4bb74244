-- Snapshots of aggregates (a table, a wallet) at a version of their stream, so that loading
-- one costs the same whatever its age: the newest snapshot, then only the events after it.
--
-- Derived and disposable, like the read models: nothing here is ever a source of truth. A
-- reader uses a snapshot only if its `schema` (a fingerprint of the state's shape and of the
-- code that folds it) is the reader's own, the stream has reached its version, and it
-- decodes; otherwise it replays the stream from the start. `TRUNCATE snapshots` is always
-- safe: loads get slower until the next appends take new ones.
CREATE TABLE snapshots (
    stream_id text        NOT NULL,
    version   integer     NOT NULL CHECK (version >= 1),
    schema    text        NOT NULL,
    state     jsonb       NOT NULL,
    taken_at  timestamptz NOT NULL,
    -- The load's one query walks this index backwards: the newest snapshot of a stream first.
    PRIMARY KEY (stream_id, version)
);

-- The application takes snapshots, reads them and drops the ones a newer one replaces. It
-- still may only read `events` and append through append_events() (migration 0004): nothing
-- here touches the log or its grants.
REVOKE ALL ON snapshots FROM PUBLIC;
GRANT SELECT, INSERT, DELETE ON snapshots TO shoebox_app;
