"""`MODULE:ATTR` targets (`askback serve ops:app`, `--token-verifier auth:verifier`): imported, and when one is wrong,
refused with what would work.

A target is a module's import path and an attribute of it, and the first minutes with askback bring the same three
mistakes: a file's path (`ops.py:app`), a module named from memory (`ops:app` for `ops_app.py`) and an attribute
that is not the one the module defines (`ops_app:application`). `suggestions` says, from what the current directory
and the module hold, what to give instead; it only reads names, and `load_object` puts its words in the error.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from askback._where import traceback_line
from askback.errors import ConfigurationError

__all__ = ["close_modules", "file_target", "load_object", "module_suggestion"]


def file_target(module_name: str, attr: str) -> str | None:
    """`MODULE:ATTR` for a target given as a file's path (`ops.py`, `./pkg/ops.py`), or `None` when it is not one."""
    if not module_name.endswith(".py") and "/" not in module_name and os.sep not in module_name:
        return None
    path = Path(module_name.removesuffix(".py"))
    parts = [part for part in path.parts if part not in (".", "")]
    if not parts or any(part == ".." or not part.isidentifier() for part in parts):
        return None
    return f"{'.'.join(parts)}:{attr}"


def close_modules(wanted: str, folder: Path) -> list[str]:
    """Modules (`x.py`) and packages (`x/__init__.py`) in `folder` whose names are close to `wanted`'s first part."""
    first = wanted.split(".")[0]
    names = sorted(
        {
            entry.stem if entry.is_file() else entry.name
            for entry in _entries(folder)
            if (entry.is_file() and entry.suffix == ".py") or (entry / "__init__.py").is_file()
        }
    )
    names = [name for name in names if name.isidentifier()]
    close = difflib.get_close_matches(first, names, n=3, cutoff=0.6)
    # `ops` for `ops_app.py`: a name that begins with what was typed is close whatever its length.
    close += [name for name in names if name.startswith(first) and name not in close and name != first]
    return close[:3]


def _entries(folder: Path) -> Iterable[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def module_suggestion(module_name: str, attr: str, folder: Path) -> str:
    """What to say after `cannot import MODULE` when no module of that name exists: the close ones in `folder`."""
    close = close_modules(module_name, folder)
    if not close:
        return (
            f"no module {module_name!r} in the current directory ({folder}) or on the import path: MODULE is the "
            "import path of your file without .py (app.py is app:ATTR), run from the folder that holds it"
        )
    found = " or ".join(f"{name}:{attr}" for name in close)
    return f"no module {module_name!r} in the current directory ({folder}) or on the import path; did you mean {found}?"


def _defined(module: Any, kind: type | None, attr: str) -> list[str]:
    """The attributes of `module` that could be meant instead of `attr`: the objects of `kind` it holds, else the
    names close to `attr`."""
    names = [name for name in dir(module) if not name.startswith("__")]
    if kind is not None:
        return [name for name in names if isinstance(getattr(module, name, None), kind)]
    return difflib.get_close_matches(attr, names, n=3, cutoff=0.6)


def load_object(target: str, what: str, kind: type | None = None) -> Any:
    """Import `MODULE:ATTR` and return the object it names. When the module has no `ATTR`, the error names the
    objects of `kind` it does define (the `Askback` servers, for `askback serve`)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{target!r} is not MODULE:ATTR (for {what}, e.g. askback.demo:server)")
    from_file = file_target(module_name, attr)
    if from_file is not None:
        raise ConfigurationError(
            f"{target!r} names a file: MODULE is a module's import path, without .py; give {from_file} (run from "
            "the folder that holds it)"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise ConfigurationError(
            f"cannot import {module_name!r}: {type(exc).__name__} at {exc.filename}:{exc.lineno}: {exc.msg}"
        ) from exc
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):
            raise ConfigurationError(
                f"cannot import {module_name!r}: {module_suggestion(module_name, attr, Path(cwd))}"
            ) from exc
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:
        # The module's own code raised while being imported: name the exception and the line of that code it came
        # from (not askback's, nor a library's); running `python -c "import MODULE"` shows the whole traceback.
        line = traceback_line(exc.__traceback__)
        said = str(exc)
        where = f" at {line}" if line and line not in said else ""
        raise ConfigurationError(
            f"cannot import {module_name!r}: it raised {type(exc).__name__}: {said}{where}"
        ) from exc
    if not hasattr(module, attr):
        defined = _defined(module, kind, attr)
        if defined:
            found = " or ".join(f"{module_name}:{name}" for name in defined)
            raise ConfigurationError(f"{module_name!r} has no {attr!r}; did you mean {found}?")
        none = f", and defines no {kind.__name__}" if kind is not None else ""
        raise ConfigurationError(f"{module_name!r} has no {attr!r}{none}")
    return getattr(module, attr)
