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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from askback.core.text import name_problem
from askback.errors import InvalidTokenError

__all__ = [
    "MAX_ACTORS",
    "MAX_PRINCIPAL",
    "Caller",
    "actors_of",
    "checked_principal",
    "home_spelled",
    "missing_scopes",
    "principal_of",
    "split_principal",
    "split_scopes",
]

# The width of every stored principal column (accounts, links, tasks, parked calls, the audit trail); a subject of an
# issuer is at most 255 characters too (OpenID Connect Core 2), and no deployment's user needs more.
MAX_PRINCIPAL = 255
# The most actors an `act` chain may name (RFC 8693 sets no limit; a delegation deeper than this is not a real one).
MAX_ACTORS = 8
# Scopes one token may grant, and the length of one.
MAX_SCOPES = 100
MAX_SCOPE_LENGTH = 128


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


def home_spelled(principal: str, home: str | None) -> str:
    """`principal` as `principal_of` spells it on a deployment whose home issuer is `home`: `<home>#<subject>`
    becomes the bare subject (when the subject holds no `#`), anything else is returned as it is. What makes the
    principals of a check that knows no home issuer (a token verifier that returns `iss`) comparable with those of
    one that does (people's sign-in)."""
    issuer, subject = split_principal(principal)
    if home is not None and issuer == home and "#" not in subject:
        return subject
    return principal


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


def checked_scopes(scopes: Iterable[str]) -> tuple[str, ...]:
    """`scopes` when a token may grant them; `InvalidTokenError` (401 `invalid_token`) for more than `MAX_SCOPES`,
    or one that is longer than `MAX_SCOPE_LENGTH` or not a name people can be shown (`name_problem`): scopes are
    stored in the audit trail and written in its log lines. Every way a caller is named goes through it."""
    found = tuple(scopes)
    if len(found) > MAX_SCOPES:
        raise InvalidTokenError(f"the token grants more than {MAX_SCOPES} scopes")
    for scope in found:
        problem = name_problem(scope, what="a scope of the token", limit=MAX_SCOPE_LENGTH)
        if problem is not None:
            raise InvalidTokenError(problem)
    return found


def split_scopes(value: str) -> tuple[str, ...]:
    """The scopes of a scope string, split on the space character only (RFC 6749 section 3.3): another whitespace
    (a no-break space, a tab) is part of a scope, never a separator."""
    return tuple(scope for scope in value.split(" ") if scope)


def actors_of(
    claims: Mapping[str, Any], *, issuer: str | None, home: str | None, principal_claim: str = "sub"
) -> tuple[str, ...]:
    """The principals of the token's `act` chain (RFC 8693 section 4.1: `{"act": {"sub": ..., "act": {...}}}`), the
    current actor first, each spelled by `principal_of` against the home issuer `home`: an actor's issuer is its own
    `iss`, where it names one, else the token's (`issuer`). Each actor is named by `principal_claim` of its object,
    the claim the token's principal is named by (`ASKBACK_AUTH_PRINCIPAL_CLAIM`), so that an actor compares equal to
    the same person signed in to a page. `InvalidTokenError` for an `act` that is not an object naming its actor by
    that claim (an actor askback cannot name is one it could not refuse as an approver), or a chain deeper than
    `MAX_ACTORS`."""
    actors: list[str] = []
    act = claims.get("act")
    while act is not None:
        if len(actors) == MAX_ACTORS:
            raise InvalidTokenError(f"the token's act claim nests more than {MAX_ACTORS} actors")
        if not isinstance(act, Mapping):
            raise InvalidTokenError("the token's act claim is not an object")
        sub, iss = act.get(principal_claim), act.get("iss", issuer)
        if not isinstance(sub, str):
            if principal_claim == "sub":
                raise InvalidTokenError("an actor in the token's act claim names no subject")
            raise InvalidTokenError(
                f"an actor in the token's act claim has no {principal_claim!r}, the claim that names principals"
            )
        if "iss" in act and not isinstance(iss, str):
            # A null issuer would spell the actor as nobody's, which reads as a home principal.
            raise InvalidTokenError("an actor in the token's act claim names an issuer that is not a string")
        try:
            actors.append(principal_of(sub, iss, home=home))
        except ValueError as exc:
            raise InvalidTokenError(f"an actor in the token's act claim is not usable: {exc}") from None
        act = act.get("act")
    return tuple(actors)
