"""Structured logs: one JSON object a line, the same shape from every Shoebox process.

Every line has `time` (UTC, ISO 8601), `level`, `process` (api, worker, projector), `logger`
and `message`; a request's line adds `request_id`, `method`, `route` (the template, never the
ids in the path), `status`, `duration_ms` and `role`. Nothing logs an API key: the request
line names the key's role only.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final

import orjson

PROCESS_FIELD: Final = "process"
# The attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD: Final = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON, with the `extra=` fields beside the message."""

    def __init__(self, process: str = "shoebox", **_: Any) -> None:
        super().__init__()
        self._process = process

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object on one line."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            PROCESS_FIELD: self._process,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in _STANDARD and not name.startswith("_"):
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def skip_unwritten_fields() -> None:
    """Stop `logging` filling in, on every record, fields that no line of ours writes.

    A LogRecord looks up its thread, its thread's name and its multiprocessing process's name
    as it is made; JsonFormatter writes none of them (they are in `_STANDARD`), and building
    the record was a third of the request line's cost under py-spy (docs/benchmarks.md, "the
    web tier's CPU a request"). `process` (the pid) is kept: it is one system call.
    """
    logging.logThreads = False
    logging.logMultiprocessing = False


def configure_logging(process: str, level: int = logging.INFO) -> None:
    """Send every logger's records to stderr as JSON lines naming `process`."""
    skip_unwritten_fields()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level)


def gunicorn_log_config(process: str = "api") -> dict[str, Any]:
    """gunicorn's `logconfig_dict`: its own error log in the same JSON shape, no access log
    (the app writes one line a request, with more in it)."""
    formatter = {
        "()": f"{JsonFormatter.__module__}.{JsonFormatter.__qualname__}",
        "process": process,
    }
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": formatter},
        "handlers": {"console": handler, "error_console": handler},
        "root": {"level": "INFO", "handlers": ["console"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": False},
        },
    }
