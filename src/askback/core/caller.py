"""Who is calling a tool: the principal an authenticated request names, and what its token lets it do.

A `Caller` is what the MCP endpoint's bearer check (`askback.extension.BearerCheck`, such as the OAuth 2.1 resource
server of `askback.identity`) makes of a token, and what a handler reads as `flow.caller`. It never holds the token.

A subject is unique only within its issuer, so a principal is the pair (issuer, subject), stored and compared as one
string that `principal_of` alone makes: the bare subject for the deployment's home issuer (its
`ASKBACK_AUTH_ISSUER`) or for a name no issuer vouches for (demo tokens, a token verifier that names none), else
`<issuer>#<subject>`. An issuer is a URL without a fragment, so it holds no `#`; a bare principal holds none either
(a home subject with a `#` is qualified too), which is what keeps the two forms apart: single-issuer data needs no
migration, and no subject of one issuer can be spelled as another issuer's principal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from askback.core.text import name_problem
from askback.errors import InvalidTokenError

__all__ = [
    "MAX_PRINCIPAL",
    "Caller",
    "checked_principal",
    "missing_scopes",
    "principal_of",
    "split_principal",
    "split_scopes",
]

# The width of every stored principal column (accounts, links, tasks, parked calls, the audit trail); a subject of an
# issuer is at most 255 characters too (OpenID Connect Core 2), and no deployment's user needs more.
MAX_PRINCIPAL = 255


@dataclass(frozen=True)
class Caller:
    """An authenticated caller.

    - `principal`: who the token names, as `principal_of` spells it: its `sub` (or the configured claim) when the
      token comes from the home issuer, else qualified by its issuer (`https://other.example.com#alice`); what
      sealed state, the audit trail, tasks and connected accounts are bound to.
    - `scopes`: the scopes the token grants.
    - `client_id`: the OAuth client the token was issued to, where it says.
    - `issuer`: the authorization server that issued the token, where there is one.
    - `expires_at`: the token's expiry (seconds since the epoch), where it says;
    - `actors`: who acts for the principal (the token's RFC 8693 `act` chain), each spelled by `principal_of`, the
      current actor first; none for a token that names no actor. An approval is never approved by one of them.
    """

    principal: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    client_id: str | None = None
    issuer: str | None = None
    expires_at: int | None = None
    actors: tuple[str, ...] = ()

    @property
    def subject(self) -> str:
        """The name the issuer gave (the principal without its issuer)."""
        return split_principal(self.principal)[1]


def principal_of(subject: str, issuer: str | None, *, home: str | None) -> str:
    """The principal `subject` of `issuer` is, on a deployment whose home issuer is `home` (see the module's
    docstring): `subject` itself when `issuer` is `home` or none, and the subject holds no `#`; else
    `<issuer>#<subject>` (`#<subject>` for a subject with a `#` that no issuer vouches for). `ValueError` for a
    subject `checked_principal` refuses, an issuer holding a `#` (a URL with a fragment, never an issuer's
    identifier) or what no name may hold, or a principal longer than `MAX_PRINCIPAL` characters."""
    problem = name_problem(subject, what="the subject", limit=MAX_PRINCIPAL)
    if problem is not None:
        raise ValueError(problem)
    if issuer is not None and (not issuer or "#" in issuer or name_problem(issuer, what="", limit=MAX_PRINCIPAL)):
        raise ValueError("the issuer is not a URL without a fragment")
    bare = (issuer == home or issuer is None) and "#" not in subject
    principal = subject if bare else f"{issuer or ''}#{subject}"
    if len(principal) > MAX_PRINCIPAL:
        raise ValueError(f"the principal is longer than {MAX_PRINCIPAL} characters with its issuer")
    return principal


def split_principal(principal: str) -> tuple[str | None, str]:
    """The (issuer, subject) a principal of `principal_of` names; the issuer is `None` for a bare principal (the home
    issuer's, or nobody's) and for `#<subject>`."""
    issuer, mark, subject = principal.partition("#")
    if not mark:
        return None, principal
    return issuer or None, subject


def missing_scopes(granted: frozenset[str] | set[str], required: tuple[str, ...]) -> tuple[str, ...]:
    """The scopes of `required` that `granted` lacks, in `required`'s order."""
    return tuple(scope for scope in required if scope not in granted)


def checked_principal(principal: str) -> str:
    """`principal` when it may name a caller; `InvalidTokenError` (401 `invalid_token`) when it is empty, longer
    than `MAX_PRINCIPAL` or holds a control, line break or bidirectional character. Every way a caller is
    named (a JWT, introspection, a token verifier, demo tokens, people's sign-in) goes through it."""
    problem = name_problem(principal, what="the token's principal", limit=MAX_PRINCIPAL)
    if problem is not None:
        raise InvalidTokenError(problem)
    return principal


def split_scopes(value: str) -> tuple[str, ...]:
    """The scopes of a scope string, split on the space character only (RFC 6749 section 3.3): another whitespace
    (a no-break space, a tab) is part of a scope, never a separator."""
    return tuple(scope for scope in value.split(" ") if scope)
