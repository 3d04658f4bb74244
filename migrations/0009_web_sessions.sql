-- Server-side sessions of the pages (/play and /dashboard; docs/operations.md, "Demo mode").
-- The browser's cookie holds only a random session id; this table holds what it stands for.
-- Rows are keyed by the id's SHA-256, so that a read of this table yields no usable cookie.
-- Not events: a session is a convenience of the web layer, not a fact of the game, and it is
-- deleted when it ends, which the append-only log could not do.
CREATE TABLE IF NOT EXISTS web_sessions (
    session_sha256 text PRIMARY KEY,
    -- 'play': a demo player, acting with the demo frontend key; 'ops': a dashboard signed in
    -- with an ops or regulator key.
    kind text NOT NULL CHECK (kind IN ('play', 'ops')),
    player_id text,
    -- The dashboard's key, which the server keeps so that the browser never holds it. Play
    -- sessions hold none: they act with the server's own demo key.
    api_key text,
    role text NOT NULL,
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
-- Expired sessions are swept by expiry.
CREATE INDEX IF NOT EXISTS web_sessions_expires_at ON web_sessions (expires_at);

GRANT SELECT, INSERT, UPDATE, DELETE ON web_sessions TO shoebox_app;
