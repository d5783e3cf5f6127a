"""Logging for `askback serve`, on stderr: one JSON object per line for a log pipeline, so that the audit lines'
fields (`extra`) reach it as fields, or one line of text per record for a person at a terminal (time, level,
logger, message, then the fields as key=value). `auto` picks text when stderr is a terminal and JSON otherwise.
Configured before the server is imported, so the SDK's own console logging (a rich handler, slow per line) is not
installed.

Records are formatted and written off the request path: a request only puts each record on a queue, and one
thread per process formats and writes them (stopped, with the queue drained, when the process exits)."""

from __future__ import annotations

import atexit
import json
import logging
import logging.handlers
import os
import queue
import sys
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal, TextIO

from askback.core.terminal_text import for_terminal

__all__ = ["FORMATS", "JsonFormatter", "LogFormat", "TextFormatter", "configure", "parse_format", "resolve"]

LogFormat = Literal["auto", "json", "text"]
FORMATS: tuple[LogFormat, ...] = ("auto", "json", "text")

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _fields(record: logging.LogRecord) -> Iterator[tuple[str, Any]]:
    """The record's own fields (its `extra`), in the order they were given."""
    for key, value in vars(record).items():
        if key not in _STANDARD and not key.startswith("_"):
            yield key, value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(_fields(record))
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, separators=(",", ":"))


# SGR colours of each level, as uvicorn shows them; the time, logger and fields are dimmed.
_COLOURS = {"DEBUG": "36", "INFO": "32", "WARNING": "33", "ERROR": "31", "CRITICAL": "1;31"}


def _value(value: Any) -> str:
    """A field's value as key=value shows it: a plain word as it is, anything else as JSON (quoted, escaped)."""
    if isinstance(value, str) and value and not any(c.isspace() or c in '"=\\' for c in value):
        return value
    return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """`2026-07-28 12:00:01 INFO     askback.serve message  key=value ...`, local time, one line per record (a
    traceback follows on its own lines); coloured when `colour`. A record's text may come from a request (a tool
    name, a principal), so all of it goes through `for_terminal`: it cannot drive the terminal nor break the line."""

    def __init__(self, *, colour: bool = False) -> None:
        super().__init__()
        self.colour = colour

    def _paint(self, text: str, sgr: str) -> str:
        return f"\x1b[{sgr}m{text}\x1b[0m" if self.colour else text

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).strftime("%Y-%m-%d %H:%M:%S")
        level = self._paint(f"{record.levelname:<8}", _COLOURS.get(record.levelname, "0"))
        parts = [
            self._paint(when, "2"),
            level,
            self._paint(for_terminal(record.name), "2"),
            for_terminal(record.getMessage()),
        ]
        fields = " ".join(f"{for_terminal(key)}={for_terminal(_value(value))}" for key, value in _fields(record))
        line = " ".join(parts) + (f"  {self._paint(fields, '2')}" if fields else "")
        if record.exc_info:
            line += "\n" + for_terminal(self.formatException(record.exc_info), lines=True)
        return line


def parse_format(value: str) -> LogFormat | None:
    """`value` as a log format, or None when it is none of `FORMATS`."""
    for fmt in FORMATS:
        if value == fmt:
            return fmt
    return None


def resolve(fmt: LogFormat, stream: TextIO) -> Literal["json", "text"]:
    """The format `auto` stands for on `stream`: text for a person at a terminal, JSON for everything else."""
    if fmt != "auto":
        return fmt
    return "text" if _is_terminal(stream) else "json"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False


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


def configure(level: str = "info", fmt: LogFormat = "json") -> None:
    """Send every record to stderr in `fmt` (`auto`: text on a terminal, JSON otherwise), written by one thread;
    askback's own loggers at `level`, libraries at WARNING. Text is coloured on a terminal unless NO_COLOR is set."""
    global _listener
    handler = logging.StreamHandler(sys.stderr)
    if resolve(fmt, sys.stderr) == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter(colour=_is_terminal(sys.stderr) and not os.environ.get("NO_COLOR")))
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
