"""Read models folded from the log into PostgreSQL tables, and the machinery that keeps them.

Each module holds one read model (a `Projection`); `runner` follows the log with catch-up
subscriptions and rebuilds a model beside the live one. Payloads are read as the JSON the log
holds, by (category, type): this package may not import the service's codec, and a fold over
plain dicts is also what keeps a rebuild near the speed of reading the log.
"""
