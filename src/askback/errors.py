"""The askback exception tree.

Every error askback raises derives from `AskbackError`. Errors that reach the wire carry what the protocol
needs (JSON-RPC code and data), so the mapping to MCP happens in exactly one place (`AskbackError.to_mcp_error`);
the SDK's transport picks the HTTP status from the code (400 for -32021). Each message says what happened, why, and what to do next.

    AskbackError
    ├── ConfigurationError          bad or missing settings, refused at start-up
    ├── DefinitionError             a question or tool defined wrongly, refused when it is defined
    ├── MissingCapabilityError      -32021: this request did not declare what the question needs (HTTP 400)
    ├── StoreUnavailableError       -32603: the database could not be reached; safe to retry
    ├── EffectInProgressError       -32603: another attempt of the same effect has not finished; retry later
    ├── RoundInProgressError        -32603: another copy of the same round has not finished; retry later
    ├── InvalidParamsError          -32602: the request's arguments carry what no tool may take (HTTP 400)
    └── ProbeError                  `askback check` cannot probe the server at all (unreachable, not an MCP
                                    endpoint, refused, no such tool); the command exits with status 2
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.shared.exceptions import MCPError

# JSON-RPC codes (the spec's; the SDK's `mcp_types` names them too). Written out so that importing the error tree,
# which every command does, does not import the SDK.
INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021

__all__ = [
    "AskbackError",
    "ConfigurationError",
    "DefinitionError",
    "EffectInProgressError",
    "InvalidParamsError",
    "MissingCapabilityError",
    "ProbeError",
    "RoundInProgressError",
    "StoreUnavailableError",
]


class AskbackError(Exception):
    """Base of every askback error."""

    code: int = INTERNAL_ERROR

    def wire_data(self) -> dict[str, Any] | None:
        return None

    def to_mcp_error(self) -> MCPError:
        """The JSON-RPC error this condition is on the wire (the SDK picks the HTTP status from the code)."""
        from mcp.shared.exceptions import MCPError

        return MCPError(code=self.code, message=str(self), data=self.wire_data())


class ConfigurationError(AskbackError):
    """Settings are missing or invalid; the message names the variable to set."""


class DefinitionError(AskbackError, TypeError):
    """A question or tool is defined in a way that can never work; raised at definition time."""


class MissingCapabilityError(AskbackError):
    """The request did not declare a client capability that a question needs, and there is no fallback."""

    code = MISSING_REQUIRED_CLIENT_CAPABILITY

    def __init__(self, required: dict[str, Any], message: str | None = None) -> None:
        self.required = required
        super().__init__(message or _describe_required(required))

    def wire_data(self) -> dict[str, Any]:
        return {"requiredCapabilities": self.required}


class StoreUnavailableError(AskbackError):
    """The database behind flows, effects and audit could not be reached. Nothing was done; retry the call."""

    def wire_data(self) -> dict[str, Any]:
        return {"retryable": True}


class EffectInProgressError(AskbackError):
    """An earlier attempt of this effect started but has not recorded an outcome yet."""

    def wire_data(self) -> dict[str, Any]:
        return {"retryable": True}


class RoundInProgressError(AskbackError):
    """Another copy of this round (same state, another request) is being answered and has not finished."""

    def wire_data(self) -> dict[str, Any]:
        return {"retryable": True}


class InvalidParamsError(AskbackError):
    """The request's parameters cannot be taken (text that is not valid Unicode, for one)."""

    code = INVALID_PARAMS


class ProbeError(AskbackError):
    """`askback check` could not probe the server at all: the message says what was seen and what to change.

    Raised before any verdict is given (a server that answers badly gets failed checks, not this error).
    """


def _describe_required(required: dict[str, Any]) -> str:
    modes = sorted((required.get("elicitation") or {}).keys())
    what = " and ".join(f"{m} elicitation" for m in modes) or "elicitation"
    return (
        f"Server requires the {what} capability for this request: declare {required} (2026-07-28: in the "
        "request's _meta io.modelcontextprotocol/clientCapabilities; 2025-11-25: at initialize), "
        "or call a tool that does not need to ask the user."
    )
