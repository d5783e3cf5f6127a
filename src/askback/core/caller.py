"""Who is calling a tool: the principal an authenticated request names, and what its token lets it do.

A `Caller` is what the MCP endpoint's bearer check (`askback.extension.BearerCheck`, such as the OAuth 2.1 resource
server of `askback.identity`) makes of a token, and what a handler reads as `flow.caller`. It never holds the token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from askback.core.text import name_problem
from askback.errors import InvalidTokenError

__all__ = ["MAX_PRINCIPAL_LENGTH", "Caller", "checked_principal", "missing_scopes", "split_scopes"]

# A principal is shown in tables, pages and logs and keys every row of its own: a subject of an issuer is at most
# 255 characters (OpenID Connect Core 2), and no deployment's user needs more.
MAX_PRINCIPAL_LENGTH = 255


@dataclass(frozen=True)
class Caller:
    """An authenticated caller.

    - `principal`: the user the token names (its `sub`, or the configured claim); what sealed state, the audit
      trail and connected accounts are bound to.
    - `scopes`: the scopes the token grants.
    - `client_id`: the OAuth client the token was issued to, where it says.
    - `issuer`: the authorization server that issued the token, where there is one.
    - `expires_at`: the token's expiry (seconds since the epoch), where it says.
    """

    principal: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    client_id: str | None = None
    issuer: str | None = None
    expires_at: int | None = None


def missing_scopes(granted: frozenset[str] | set[str], required: tuple[str, ...]) -> tuple[str, ...]:
    """The scopes of `required` that `granted` lacks, in `required`'s order."""
    return tuple(scope for scope in required if scope not in granted)


def checked_principal(principal: str) -> str:
    """`principal` when it may name a caller; `InvalidTokenError` (401 `invalid_token`) when it is empty, longer
    than `MAX_PRINCIPAL_LENGTH` or holds a control, line break or bidirectional character. Every way a caller is
    named (a JWT, introspection, a token verifier, demo tokens, people's sign-in) goes through it."""
    problem = name_problem(principal, what="the token's principal", limit=MAX_PRINCIPAL_LENGTH)
    if problem is not None:
        raise InvalidTokenError(problem)
    return principal


def split_scopes(value: str) -> tuple[str, ...]:
    """The scopes of a scope string, split on the space character only (RFC 6749 section 3.3): another whitespace
    (a no-break space, a tab) is part of a scope, never a separator."""
    return tuple(scope for scope in value.split(" ") if scope)
