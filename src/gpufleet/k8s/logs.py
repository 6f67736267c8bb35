"""Structured logs: one JSON object per line, what log collectors (Loki, Cloud Logging, Elasticsearch) parse
without a custom pattern. Fields passed with ``extra={...}`` become top-level keys."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any, TextIO

# Attributes every LogRecord has; anything else on a record came from ``extra`` and is logged as a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when each record comes, not as it was when the handler was made: a command
    run in-process (a test's CliRunner) swaps stderr for a stream it closes when it returns, while threads the
    command started may still log."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass  # always the current sys.stderr


def setup_logging(level: str = "info", stream: TextIO | None = None) -> None:
    """Route the root logger to ``stream`` (by default stderr, as it is when each record comes) as JSON lines;
    replaces earlier handlers."""
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would drown the rest
    logging.getLogger("httpcore").setLevel(logging.WARNING)
