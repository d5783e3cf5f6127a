"""Logging for `askback serve`: one JSON object per line on stderr (or plain text), so that the audit lines'
fields (`extra`) reach a log pipeline as fields. Configured before the server is imported, so the SDK's own
console logging (a rich handler, slow per line) is not installed.

Records are formatted and written off the request path: a request only puts each record on a queue, and one
thread per process formats and writes them (stopped, with the queue drained, when the process exits)."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import queue
import sys
from typing import Any, Literal

__all__ = ["configure"]

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, separators=(",", ":"))


class _Enqueue(logging.handlers.QueueHandler):
    """Puts the record on the queue as it is: formatting (the JSON encoding) happens on the writer's thread. The
    records askback logs carry strings and numbers only, so nothing changes under the writer."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        return record


_listener: logging.handlers.QueueListener | None = None


@atexit.register
def _drain() -> None:
    """Write what is still queued, then stop the writer (at exit, or before configuring again)."""
    global _listener
    if _listener is not None:
        _listener.stop()
        _listener = None


def configure(level: str = "info", fmt: Literal["json", "text"] = "json") -> None:
    global _listener
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter("%(levelname)s %(name)s %(message)s"))
    _drain()
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    _listener = logging.handlers.QueueListener(records, handler)
    _listener.start()
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(_Enqueue(records))
    root.setLevel(logging.WARNING)
    # askback's own loggers (the audit trail among them) at the chosen level; libraries stay at WARNING.
    logging.getLogger("askback").setLevel(level.upper())
