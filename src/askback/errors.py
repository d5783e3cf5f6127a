"""The askback exception tree.

Every error askback raises derives from `AskbackError`. Each carries what every boundary needs: the JSON-RPC
`code` and `wire_data()` (`to_mcp_error` for the SDK, whose transport picks the HTTP status from the code), the
`http_status` for replies askback's own HTTP pieces write, and the `exit_code` of the command line. Each message says what happened, why, and what to do next.

    AskbackError
    ├── ConfigurationError          bad or missing settings, refused at start-up
    ├── DefinitionError             a question or tool defined wrongly, refused when it is defined
    ├── MissingCapabilityError      -32021: this request did not declare what the question needs (HTTP 400)
    ├── ToolError                   raised by a handler: the call ends as a tool result with `isError: true` and
    │                               this message, for the model to read (the SDK's own `ToolError` works too)
    ├── ArgumentRequiredError       the client cannot ask and the question falls back to a tool argument: the call
    │                               ends as a tool error (isError) naming the argument, for the model to fix
    ├── HeaderMismatchError         -32020: MCP-Protocol-Version header and _meta disagree (HTTP 400)
    ├── ProtocolVersionMissingError -32600: no MCP-Protocol-Version header and no session (HTTP 400)
    ├── AccountStateError           a connected account cannot go from its status to the one asked for
    ├── VaultError                  a sealed credential cannot be opened (altered, another account's, unknown key)
    ├── ProviderError               a third-party provider refused (`rejected`) or could not be reached (`unreachable`)
    ├── CredentialOriginError       a connected account's credential was asked to go to an origin its connection
    │                               does not declare: nothing was sent (a tool error, for the model to read)
    ├── StoreUnavailableError       -32603: the database could not be reached; safe to retry
    ├── EffectInProgressError       -32603: another attempt of the same effect has not finished; retry later
    ├── RoundInProgressError        -32603: another copy of the same round has not finished; retry later
    ├── InvalidParamsError          -32602: the request's arguments carry what no tool may take (HTTP 400)
    │   └── InvalidStateError           the requestState is not askback's
    ├── LimitReachedError           -32602: the caller already holds as many of something as a setting allows
    │                               (live tasks, pending accounts): nothing was made; a tool error where the
    │                               model should read it (HTTP 429)
    ├── CallError                   the agent runtime: a call cannot go on (exit 5)
    │   ├── UnknownCallError            no parked call with that id (exit 4)
    │   ├── CallStateError              the call is not waiting on that round (answered, resumed, finished)
    │   ├── InvalidAnswerError          an answer does not fit its question's schema (HTTP 400, exit 2)
    │   ├── UnansweredError             an interactive renderer got no answer (the end of its input): the
    │   │                               question stays unanswered and its call parked
    │   ├── UnsafeLinkError             a URL question's link is not https (plain http only on loopback, in
    │   │                               development); it is never shown as a link nor opened
    │   ├── ServerRefusedError          the server answered the call with a JSON-RPC error (e.g. -32021: this
    │   │                               runtime cannot render what the question needs), or rounds ran out;
    │   │                               one marked retryable leaves a parked call parked
    │   ├── ServerProtocolError         the server's answer cannot be read at all (not a result of the method,
    │   │                               JSON nested too deep); a question it cannot render is parked instead
    │   ├── ServerTimeoutError          the server did not answer within the runtime's timeout; a parked call
    │   │                               stays parked as it was
    │   ├── ServerHTTPError             the server answered with an HTTP error and no JSON-RPC error (401, 403,
    │   │                               429, a proxy's 502): a parked call stays parked as it was
    │   └── ResumeDueError              `resume_due` went through every due call and some could not go on: what
    │                                   the others came to (`.outcomes`) and each one's error (`.errors`)
    ├── InvalidTokenError           a bearer token that is not accepted: 401 `invalid_token`, never the token
    ├── InsufficientScopeError      a valid token without a scope the tool needs: 403 `insufficient_scope`
    ├── IssuerUnavailableError      the authorization server cannot be reached to check a token: 503, retry later
    ├── ProbeError                  `askback check` cannot probe the server at all (unreachable, not an MCP
    │                               endpoint, refused, no such tool); the command exits with status 2
    └── ListenError                 `askback serve` cannot listen on its --host and --port (in use, not this
                                    machine's address, no such host, not permitted); exit status 2
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from askback._where import caller_line

if TYPE_CHECKING:
    from mcp.shared.exceptions import MCPError

# JSON-RPC codes (the spec's; the SDK's `mcp_types` names them too). Written out so that importing the error tree,
# which every command does, does not import the SDK.
INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021

__all__ = [
    "AccountStateError",
    "ArgumentRequiredError",
    "AskbackError",
    "CallError",
    "CallStateError",
    "ConfigurationError",
    "CredentialOriginError",
    "DefinitionError",
    "EffectInProgressError",
    "HeaderMismatchError",
    "InsufficientScopeError",
    "InvalidAnswerError",
    "InvalidParamsError",
    "InvalidStateError",
    "InvalidTokenError",
    "IssuerUnavailableError",
    "LimitReachedError",
    "ListenError",
    "MissingCapabilityError",
    "ProbeError",
    "ProtocolVersionMissingError",
    "ProviderError",
    "ResumeDueError",
    "RoundInProgressError",
    "ServerHTTPError",
    "ServerProtocolError",
    "ServerRefusedError",
    "ServerTimeoutError",
    "StoreUnavailableError",
    "ToolError",
    "UnansweredError",
    "UnknownCallError",
    "UnsafeLinkError",
    "VaultError",
]


class AskbackError(Exception):
    """Base of every askback error."""

    code: int = INTERNAL_ERROR
    http_status: int = 500
    exit_code: int = 2
    # True for conditions the model should read and act on: the MCP boundary answers them as a tool result with
    # `isError: true` rather than a JSON-RPC error.
    tool_error: bool = False

    def wire_data(self) -> dict[str, Any] | None:
        return None

    def to_mcp_error(self) -> MCPError:
        """The JSON-RPC error this condition is on the wire (the SDK picks the HTTP status from the code)."""
        from mcp.shared.exceptions import MCPError

        return MCPError(code=self.code, message=str(self), data=self.wire_data())


class ConfigurationError(AskbackError):
    """Settings are missing or invalid; the message names the variable to set."""


class DefinitionError(AskbackError, TypeError):
    """A question or tool is defined in a way that can never work; raised at definition time.

    Its text ends with the line of the code that called askback (`(defined at ops.py:12)`: `where`, the first frame
    outside askback, the standard library and the SDK), so that an error whose traceback ends in askback's own
    files still names the line to change. `when` says what that line did (`defined`, `asked`). `message` is the
    text alone, which is what reaches a client (`to_mcp_error`): a server's file names stay on the server."""

    def __init__(self, message: str, *, when: str = "defined") -> None:
        super().__init__(message)
        self.message = message
        self.when = when
        self.where = caller_line()

    def __str__(self) -> str:
        return f"{self.message} ({self.when} at {self.where})" if self.where else self.message

    def to_mcp_error(self) -> MCPError:
        from mcp.shared.exceptions import MCPError

        return MCPError(code=self.code, message=self.message, data=self.wire_data())


class MissingCapabilityError(AskbackError):
    """The request did not declare a client capability that a question needs, and there is no fallback."""

    code = MISSING_REQUIRED_CLIENT_CAPABILITY
    http_status = 400

    def __init__(self, required: dict[str, Any], message: str | None = None) -> None:
        self.required = required
        super().__init__(message or _describe_required(required))

    def wire_data(self) -> dict[str, Any]:
        return {"requiredCapabilities": self.required}


class ToolError(AskbackError):
    """Raised by a handler for an error the model should read: the call completes as a tool result with
    `isError: true` and this message as its text, exactly as the SDK's `ToolError` would."""

    tool_error = True


class ArgumentRequiredError(AskbackError):
    """The request cannot ask, and the question's fallback is a tool argument the call did not give."""

    tool_error = True


class AccountStateError(AskbackError):
    """A connected account was asked to change status in a way its status table does not allow."""


class VaultError(AskbackError):
    """A sealed credential could not be opened. The message holds no plaintext and no key."""


class CredentialOriginError(AskbackError):
    """A request through a connected account's `http` client went to an origin (scheme, host, port) that its
    connection does not declare in `origins`, or the connection declares none: the request was not sent, with or
    without the credential. The message names the origins, never the credential."""

    tool_error = True


class ProviderError(AskbackError):
    """A connected account's provider refused a grant or a refresh (`reason` 'rejected': the person must connect
    again) or could not be reached or answered unexpectedly ('unreachable': a later attempt may work). The message
    names the provider's error code, never a token. `retry_at`: for a connected account in ERROR, the clock time
    before which its provider is not tried again (its backoff)."""

    def __init__(self, message: str, *, reason: str, error: str | None = None, retry_at: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.error = error
        self.retry_at = retry_at


class StoreUnavailableError(AskbackError):
    """The database behind flows, effects and audit could not be reached. Nothing was done; retry the call. The
    message may name the database (its URL, password hidden) and the driver's words, for the logs and the command
    line; a client is sent `public` (`to_mcp_error`), which names neither."""

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public or "The database is unavailable. Nothing was done twice; retry the same request later."

    def wire_data(self) -> dict[str, Any]:
        return {"retryable": True}

    def to_mcp_error(self) -> MCPError:
        from mcp.shared.exceptions import MCPError

        return MCPError(code=self.code, message=self.public, data=self.wire_data())


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
    http_status = 400


class LimitReachedError(AskbackError):
    """The caller already holds as many of something as a setting allows (`limit`: its value), such as tasks that
    have not ended or accounts whose link was never used: nothing was made. The message names the limit and what to
    do. On the wire -32602 with `data.limit`, or a tool result with `isError` (`tool_error=True`) where the model
    reads it and can act (the META exposure's `connect_account`, `flow.connect`)."""

    code = INVALID_PARAMS
    http_status = 429

    def __init__(self, message: str, *, limit: int, tool_error: bool = False) -> None:
        super().__init__(message)
        self.limit = limit
        self.tool_error = tool_error

    def wire_data(self) -> dict[str, Any]:
        return {"limit": self.limit}


class InvalidStateError(InvalidParamsError):
    """The `requestState` was sealed by this server's keys but does not hold askback's flow state. The message and
    data are the SDK's own for a state that fails verification, so the two cannot be told apart from outside."""

    def __init__(self) -> None:
        super().__init__("Invalid or expired requestState")

    def wire_data(self) -> dict[str, Any]:
        return {"reason": "invalid_request_state"}


class HeaderMismatchError(AskbackError):
    """R3: the `MCP-Protocol-Version` header names another version than the request's `_meta`."""

    code = HEADER_MISMATCH
    http_status = 400


class ProtocolVersionMissingError(AskbackError):
    """A request with neither an `MCP-Protocol-Version` header nor a session; `data.supported` lists the versions."""

    code = INVALID_REQUEST
    http_status = 400

    def __init__(self, message: str, supported: list[str]) -> None:
        super().__init__(message)
        self.supported = supported

    def wire_data(self) -> dict[str, Any]:
        return {"supported": self.supported}


class CallError(AskbackError):
    """The agent runtime could not go on with a call; the message says which call and what to do. On the command
    line: exit status 5, apart from its children that say otherwise."""

    exit_code = 5


class UnknownCallError(CallError):
    """No call with that id is kept by this runtime's store."""

    http_status = 404
    exit_code = 4


class CallStateError(CallError):
    """The call is not waiting on the round an answer or a resume was meant for: it was answered, resumed by
    another process, completed or failed meanwhile."""

    http_status = 409


class InvalidAnswerError(CallError):
    """An answer does not fit its question: a missing required field, a wrong type, a value outside the enum.
    `problems` says what is wrong with each field, by field name (empty when the answer as a whole is wrong)."""

    http_status = 400
    exit_code = 2  # what was typed does not fit: a usage error

    def __init__(self, message: str, *, problems: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or {}


class UnansweredError(CallError):
    """An interactive renderer got no answer to a question (the end of its input): raised by `ask`, it leaves the
    question (and the rest of its round) unanswered, and the call parked for the inbox or a later run."""


class UnsafeLinkError(CallError):
    """A URL-mode question's link is not one the runtime will show as a link: not https (plain http is accepted
    only on loopback, in development mode), or carrying credentials in its user-info."""


class ServerRefusedError(CallError):
    """The server ended the call with a JSON-RPC error instead of a result (`code`, `data` as it sent them), or the
    call went past the runtime's round cap (`code` is None). With `retryable` (the server's `data.retryable: true`,
    as askback's servers send for a database that is down or a round still running elsewhere) the call did not end:
    a parked call stays parked on its round with its answers, to be resumed again."""

    def __init__(self, message: str, *, code: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.server_code = code
        self.data = data
        self.retryable = isinstance(data, Mapping) and data.get("retryable") is True


class ServerProtocolError(CallError):
    """The server answered a round with something the runtime cannot read as the method's result at all (a result
    of the wrong shape, `inputRequests` that are not questions, JSON nested past the parser's limit). A question
    whose form alone cannot be rendered is not this error: it is parked, shown with what is wrong, and can be
    declined or cancelled. The message names what was wrong, never the server's text itself."""


class ServerTimeoutError(CallError):
    """The server did not answer within the runtime's timeout (`Runtime(timeout=...)`, `--timeout`). Nothing the
    call had is lost: a parked call stays parked on its round with its answers, to be resumed again later."""


class ServerHTTPError(CallError):
    """The server (or a proxy in front of it) answered with an HTTP error status (`status`) and no JSON-RPC error:
    401 without a valid token, 403, 429, 502, 503. It did not judge the round, so nothing the call had is lost: a
    parked call stays parked on its round with its answers, to be resumed again (with its token, if it was 401)."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class ResumeDueError(CallError):
    """`Runtime.resume_due` resumed every call that was due (or `Runtime.account_active` sent back every call
    waiting for the account), and some of them could not go on: one call's server being down or refusing never
    keeps the others from going. `outcomes` holds what the others came to (the runtime's `Outcome`s: the error tree
    names no product's types), in the order they were tried; `errors` maps each call id that could not go on to its
    error, which says what became of that call (most stay parked, to be resumed again)."""

    def __init__(self, outcomes: Sequence[Any], errors: Mapping[str, CallError], *, of: str = "due calls") -> None:
        done = len(outcomes)
        said = "; ".join(f"call {call_id}: {error}" for call_id, error in errors.items())
        super().__init__(f"{len(errors)} of {done + len(errors)} {of} could not be resumed ({done} went on): {said}")
        self.outcomes = tuple(outcomes)
        self.errors = dict(errors)


class InvalidTokenError(AskbackError):
    """A bearer token was sent and is not accepted: malformed, expired, not yet valid, for another audience or
    issuer, signed with a key or an algorithm that is not trusted. Answered 401 with `error="invalid_token"`
    (RFC 6750 section 3.1); the message says which check failed, never the token."""

    http_status = 401


class InsufficientScopeError(AskbackError):
    """The caller's token is valid but lacks a scope the tool needs (`scopes`): answered 403 with
    `error="insufficient_scope"` and `scope` naming them, so a client can ask its user for more."""

    http_status = 403

    def __init__(self, message: str, *, scopes: tuple[str, ...]) -> None:
        super().__init__(message)
        self.scopes = scopes

    def wire_data(self) -> dict[str, Any]:
        return {"scopes": list(self.scopes)}


class IssuerUnavailableError(AskbackError):
    """The authorization server could not be reached or answered badly (discovery, keys, introspection), so a
    token could not be checked at all: answered 503 with `Retry-After`, never as an accepted token. `retry_after`:
    seconds to wait before trying again."""

    http_status = 503

    def __init__(self, message: str, *, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def wire_data(self) -> dict[str, Any]:
        return {"retryable": True}


class ProbeError(AskbackError):
    """`askback check` could not probe the server at all: the message says what was seen and what to change.

    Raised before any verdict is given (a server that answers badly gets failed checks, not this error).
    """


class ListenError(AskbackError):
    """`askback serve` cannot bind its address: the message names the address, what the system said and what to
    pass instead. Raised before the server is announced, so nothing says it serves where it does not."""


def _describe_required(required: dict[str, Any]) -> str:
    modes = sorted((required.get("elicitation") or {}).keys())
    what = " and ".join(f"{m} elicitation" for m in modes) or "elicitation"
    return (
        f"Server requires the {what} capability for this request: declare {required} (2026-07-28: in the "
        "request's _meta io.modelcontextprotocol/clientCapabilities; 2025-11-25: at initialize), "
        "or call a tool that does not need to ask the user."
    )
