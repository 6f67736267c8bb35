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


def setup_logging(level: str = "info", stream: TextIO | None = None) -> None:
    """Route the root logger to ``stream`` (stderr) as JSON lines; replaces earlier handlers."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request would drown the rest
    logging.getLogger("httpcore").setLevel(logging.WARNING)
