"""Who the person in the browser is, as every page askback hosts asks it: the `SignIn` protocol, and the one check of
where a person may be sent back to after signing in (`safe_next_path`).

A sign-in answers two questions: who opens this page (`await sign_in(request)`: a principal, or `None` for nobody),
and where to send a person who is not signed in (`sign_in_url(request, next_path)`: a URL on this site that brings
them back to `next_path` once they are, or `None` when there is no page to send them to). The hosted account pages
and the web inbox take one; `askback.identity.PeopleSignIn` (OpenID Connect) and the accounts' development sign-in
are two.

A sign-in that knows more than the principal is also a `PersonSignIn`: `await sign_in.person(request)` is the
`SignedInPerson`, with the groups the sign-in gave them and how they signed in (the approvals' pages record both
with a decision). Both sign-ins above are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = ["PersonSignIn", "SignIn", "SignedInPerson", "safe_next_path"]

_MAX_NEXT = 2048


@runtime_checkable
class SignIn(Protocol):
    """Who is signed in on a page, and where to sign in. (`isinstance(x, SignIn)` tells one from a plain callable that
    only says who is signed in, such as an accounts `SignInVerifier`.)"""

    async def __call__(self, request: Request) -> str | None:
        """The principal of the person who sent `request`; `None` when nobody is signed in."""
        ...

    def sign_in_url(self, request: Request, next_path: str) -> str | None:
        """Where to send a person who is not signed in, to come back to `next_path` (a path on this site); `None`
        when there is no sign-in page."""
        ...


@dataclass(frozen=True)
class SignedInPerson:
    """The person who sent a request, as their sign-in names them: `principal` (as `askback.core.caller.principal_of`
    spells it), the `groups` their sign-in gave them (each a name `askback.core.text.name_problem` accepts), and
    `method`, how they signed in (`oidc <issuer>`, `development`)."""

    principal: str
    groups: frozenset[str] = field(default_factory=frozenset)
    method: str = "sign-in"


@runtime_checkable
class PersonSignIn(Protocol):
    """A sign-in that says who is signed in with their groups (`isinstance(x, PersonSignIn)` tells one from a sign-in
    that knows only the principal)."""

    async def person(self, request: Request) -> SignedInPerson | None:
        """The person who sent `request`; `None` when nobody is signed in."""
        ...


def safe_next_path(path: str | None) -> str | None:
    """`path` when it is a path on this site (`/accounts/start?t=...`), else `None`: never a URL to another site,
    whatever a browser would make of it (`//host`, `/\\host`, `https:...`, control characters)."""
    if not path or not path.startswith("/") or path.startswith(("//", "/\\")) or len(path) > _MAX_NEXT:
        return None
    if any(c == "\\" or ord(c) < 0x21 or ord(c) == 0x7F for c in path):
        return None
    parts = urlsplit(path)
    return path if not parts.scheme and not parts.netloc else None
