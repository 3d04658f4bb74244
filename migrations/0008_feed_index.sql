-- The live feed (docs/api.md, "The live feed") resumes a table's feed after a log position:
-- "the events of streams table:T and chat:T after position p, in log order". The primary
-- key (position) would scan every table's events since p, and (stream_id, version) cannot
-- seek by position, so each stream gets its events in log order here. The global feed
-- reads by (category, position), which 0001 already indexes.
CREATE INDEX IF NOT EXISTS events_stream_position ON events (stream_id, position);

-- GET /readyz compares the migrations applied with those the service ships; the service
-- connects as the application role, which may read the list but never change it.
GRANT SELECT ON _yoyo_migration TO shoebox_app;
