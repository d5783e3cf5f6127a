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
        "ArgumentRequiredError",
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
        "ToolError",
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
    for statement in ("import askback", "import askback.tools.lint", "import askback.errors"):
        assert not loaded_after(statement) & set(HEAVY), statement


def test_the_command_line_loads_no_server_stack_until_a_command_needs_it() -> None:
    assert not loaded_after("import askback.cli") & {"sqlalchemy", "starlette", "uvicorn", "mcp"}


def test_the_error_codes_are_the_sdks() -> None:
    assert errors.INTERNAL_ERROR == mcp_types.INTERNAL_ERROR
    assert errors.INVALID_PARAMS == mcp_types.INVALID_PARAMS
    assert errors.MISSING_REQUIRED_CLIENT_CAPABILITY == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert errors.INVALID_REQUEST == mcp_types.INVALID_REQUEST
    assert errors.HEADER_MISMATCH == mcp_types.HEADER_MISMATCH


def test_each_error_knows_its_wire_code_http_status_and_exit_code() -> None:
    cases = [
        (errors.MissingCapabilityError({"elicitation": {}}), -32021, 400),
        (errors.InvalidStateError(), -32602, 400),
        (errors.InvalidParamsError("bad"), -32602, 400),
        (errors.HeaderMismatchError("x"), -32020, 400),
        (errors.ProtocolVersionMissingError("x", ["2026-07-28"]), -32600, 400),
        (errors.StoreUnavailableError("down"), -32603, 500),
        (errors.ConfigurationError("set X"), -32603, 500),
    ]
    for exc, code, status in cases:
        wire = exc.to_mcp_error()
        assert (wire.error.code, exc.http_status, exc.exit_code) == (code, status, 2)
        assert wire.error.message == str(exc) and wire.error.data == exc.wire_data()
    assert errors.InvalidStateError().wire_data() == {"reason": "invalid_request_state"}
