"""The event log: event types, the PostgreSQL store and its in-memory fake, and projections."""
