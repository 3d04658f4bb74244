"""The application service's own typed errors, beside the domain's rule refusals.

A `DomainError` means a game rule refused the command (409 or 422, naming the rule); these
mean something about the request itself: what it names does not exist, or the service could
not get a consistent write in after several tries.
"""

# ruff: noqa: N818 -- named for what happened, as callers read them: `except TableNotFound`.


class ServiceError(Exception):
    """Base of the errors an application service raises besides domain refusals."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class NotFound(ServiceError):
    """The request names something that does not exist (a 404)."""


class TableNotFound(NotFound):
    """No table has this id."""

    def __init__(self, table_id: str) -> None:
        super().__init__(f"no table {table_id!r}")
        self.table_id = table_id


class RoundNotFound(NotFound):
    """No round of this table has this id."""

    def __init__(self, table_id: str, round_id: str) -> None:
        super().__init__(f"table {table_id!r} has no round {round_id!r}")
        self.table_id = table_id
        self.round_id = round_id


class PlayerNotFound(NotFound):
    """The request names a player its operator has never had (issue 24).

    A player exists once it has a wallet stream (an internal player ops deposited to) or a
    seamless stream (a seamless player whose session was opened); see KnownPlayers.
    """

    def __init__(self, player_id: str) -> None:
        super().__init__(f"no player {player_id!r}")
        self.player_id = player_id


class Conflict(ServiceError):
    """Concurrent writes kept beating this command to its streams; retrying later may work."""

    def __init__(self, streams: list[str], attempts: int) -> None:
        super().__init__(
            f"gave up after {attempts} attempts: {', '.join(streams) or 'a stream'} kept "
            "changing under the command"
        )
        self.streams = streams
        self.attempts = attempts
