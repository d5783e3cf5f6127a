"""The error tree's wire mapping: askback's JSON-RPC codes are the SDK's, and each error knows its code, HTTP status
and exit code. What each public face exports, and what importing it loads, is tests/test_public_faces.py."""

from __future__ import annotations

import mcp_types

from askback import errors


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
        shown = exc.public if isinstance(exc, errors.StoreUnavailableError) else str(exc)
        assert wire.error.message == shown and wire.error.data == exc.wire_data()
    assert "down" not in errors.StoreUnavailableError("down").to_mcp_error().error.message
    assert errors.InvalidStateError().wire_data() == {"reason": "invalid_request_state"}
