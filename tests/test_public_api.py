"""The public surface of `askback`: exactly the names meant, each resolvable, and cheap to import."""

from __future__ import annotations

import subprocess
import sys

import mcp_types

import askback
from askback import errors

HEAVY = ("sqlalchemy", "starlette", "uvicorn", "opentelemetry", "mcp", "anyio")


def test_askback_exports_exactly_its_public_names() -> None:
    assert set(askback.__all__) == {
        "Accepted",
        "Argument",
        "Askback",
        "AskbackError",
        "Cancelled",
        "Choice",
        "ConfigurationError",
        "Confirm",
        "Declined",
        "Default",
        "DefinitionError",
        "EffectInProgressError",
        "Flow",
        "Form",
        "InvalidParamsError",
        "Link",
        "MissingCapabilityError",
        "Outcome",
        "ProbeError",
        "Question",
        "RoundInProgressError",
        "Settings",
        "StoreUnavailableError",
        "current_principal",
        "load_settings",
    }
    for name in askback.__all__:
        assert getattr(askback, name) is not None
    assert set(askback.__all__) <= set(dir(askback))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        askback.Nope  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "Nope" in str(exc)
    else:
        raise AssertionError("askback.Nope resolved")


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {name.split(".")[0] for name in out.split()}


def test_importing_askback_or_its_linter_loads_no_server_stack() -> None:
    for statement in ("import askback", "import askback.lint", "import askback.errors"):
        assert not loaded_after(statement) & set(HEAVY), statement


def test_the_command_line_loads_no_server_stack_until_a_command_needs_it() -> None:
    assert not loaded_after("import askback.cli") & {"sqlalchemy", "starlette", "uvicorn", "mcp"}


def test_the_error_codes_are_the_sdks() -> None:
    assert errors.INTERNAL_ERROR == mcp_types.INTERNAL_ERROR
    assert errors.INVALID_PARAMS == mcp_types.INVALID_PARAMS
    assert errors.MISSING_REQUIRED_CLIENT_CAPABILITY == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
