"""Logging for `askback serve`: one JSON object per line on stderr (or plain text), so that the audit lines'
fields (`extra`) reach a log pipeline as fields. Configured before the server is imported, so the SDK's own
console logging (a rich handler, slow per line) is not installed."""

from __future__ import annotations

import json
import logging
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


def configure(level: str = "info", fmt: Literal["json", "text"] = "json") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter("%(levelname)s %(name)s %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    # askback's own loggers (the audit trail among them) at the chosen level; libraries stay at WARNING.
    logging.getLogger("askback").setLevel(level.upper())
