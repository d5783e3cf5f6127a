"""What a request's client declared it can show: the per-request capability gate's one question."""

from __future__ import annotations

from mcp_types import ClientCapabilities

__all__ = ["MRTR_REVISION", "declares"]

# The MCP revision askback is built for: the first with multi round-trip requests (questions in `input_required`
# results). Older sessions are the legacy era (questions pushed as requests).
MRTR_REVISION = "2026-07-28"


def declares(capabilities: ClientCapabilities | None, mode: str) -> bool:
    """True when the client can show a question of `mode` ('form' or 'url')."""
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None:
        return False
    if mode == "url":
        return elicitation.url is not None
    # A bare `elicitation: {}` means form only.
    return elicitation.form is not None or elicitation.url is None
