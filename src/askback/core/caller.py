"""Who is calling a tool: the principal an authenticated request names, and what its token lets it do.

A `Caller` is what the MCP endpoint's bearer check (`askback.extension.BearerCheck`, such as the OAuth 2.1 resource
server of `askback.identity`) makes of a token, and what a handler reads as `flow.caller`. It never holds the token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Caller", "missing_scopes"]


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
