"""Where, in the code that uses askback, something happened: the line a question was defined on, or asked from.

An error raised inside askback has a traceback that ends in askback's own files; the line to change is the innermost
frame outside askback, the standard library, code made at run time (a dataclass's `__init__`, `<string>`) and the
SDK and servers that call a user's code. `DefinitionError` names it in its text; `askback serve` names it for a
module that fails to import.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from types import FrameType, TracebackType
from typing import Any

__all__ = ["caller_line", "traceback_line"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_DIRS = tuple({os.path.abspath(sysconfig.get_path(name)) for name in ("stdlib", "platstdlib")})
_SITE_DIRS = tuple({os.path.abspath(sysconfig.get_path(name)) for name in ("purelib", "platlib")})
_HOSTS = frozenset(
    {"mcp", "mcp_types", "anyio", "starlette", "uvicorn", "typer", "click", "pydantic", "_pytest", "pluggy"}
)


def caller_line(frame: FrameType | None = None) -> str | None:
    """`path:line` of the innermost frame, from `frame` (the caller's, by default) outwards, of the code that uses
    askback; `None` when there is none (the code was given with `python -c`). The path is relative to the current
    directory when it is under it."""
    found: FrameType | None = sys._getframe(1) if frame is None else frame
    while found is not None:
        filename = found.f_code.co_filename
        if _users(filename, found.f_globals.get("__name__")):
            return f"{_shown(filename)}:{found.f_lineno}"
        found = found.f_back
    return None


def traceback_line(tb: TracebackType | None) -> str | None:
    """`path:line` of the innermost frame of traceback `tb` in the code that uses askback (as `caller_line`)."""
    frames: list[tuple[str, Any, int]] = []
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_frame.f_globals.get("__name__"), tb.tb_lineno))
        tb = tb.tb_next
    return next((f"{_shown(name)}:{line}" for name, module, line in reversed(frames) if _users(name, module)), None)


def _users(filename: str, module: Any) -> bool:
    if filename.startswith("<") or (isinstance(module, str) and module.partition(".")[0] in _HOSTS):
        return False
    path = os.path.normpath(filename)
    if path.startswith(_PACKAGE_DIR + os.sep):
        return False
    # A Python built into a prefix keeps its site-packages inside its standard library's folder.
    return not _under(path, _LIBRARY_DIRS) or _under(path, _SITE_DIRS)


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(path.startswith(folder + os.sep) for folder in folders)


def _shown(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except (OSError, ValueError):  # no current directory any more, another drive
        return filename
    return filename if relative.startswith(os.pardir) else relative
