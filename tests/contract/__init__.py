"""The event store contract: one suite that every backend must pass."""
