"""Authorization links: single-use, short-lived, bound to the principal, the connection and the flow that asked.

A link carries a random token; only its SHA-256 digest is stored, so the database cannot be turned into working
links. `admit_opener` is the hosted page's first decision, before anything else happens: whoever opens the link
must be signed in as the principal it was issued to, and the link must be unused and unexpired. Each refusal comes
with a plain sentence for the page. No I/O.

Two clocks run for a link. Until it is opened, the link's own lifetime (`link_ttl`); once opened, the time allowed
to sign in at the provider and come back (`provider_visit_ttl`), which replaces it as the link's `expires_at`.

Once opened, the authorization is bound to the browser that opened it as well as to the person: the browser holds a
random value in a cookie, and what is stored for the OAuth `state` is the digest of both (`bound_state`). A callback
brought by another browser finds nothing, whoever is signed in there.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

__all__ = ["Admitted", "AuthorizationLink", "Refused", "admit_opener", "bound_state", "digest", "new_token"]

RefusalReason = Literal["unknown", "not_signed_in", "other_user", "used", "expired", "visit_expired"]

_MESSAGES: dict[RefusalReason, str] = {
    "unknown": "This link is not valid. Ask your assistant again for a new one.",
    "not_signed_in": "Sign in first: this link can only be used by the person it was made for.",
    "other_user": (
        "This link was made for another person. Nothing was changed. If you asked for it, sign in as yourself and ask "
        "your assistant again."
    ),
    "used": "This link has already been used. Nothing was changed. Ask your assistant again for a new one.",
    "expired": "This link has expired. Nothing was changed. Ask your assistant again for a new one.",
    "visit_expired": (
        "This sign-in has expired: the time allowed to sign in at the provider and come back ran out before you came "
        "back. Nothing was connected. Ask your assistant again for a new link, and start again from it."
    ),
}


@dataclass(frozen=True)
class AuthorizationLink:
    """A stored link (its token only as `token_digest`). `expires_at` is when the link expires until it is used, then
    when the person must be back from the provider."""

    token_digest: str
    account_id: str
    principal: str
    connection: str
    flow_id: str | None
    created_at: float
    expires_at: float
    used_at: float | None = None


@dataclass(frozen=True)
class Admitted:
    link: AuthorizationLink
    kind: Literal["admitted"] = "admitted"


@dataclass(frozen=True)
class Refused:
    reason: RefusalReason
    kind: Literal["refused"] = "refused"

    @property
    def message(self) -> str:
        return _MESSAGES[self.reason]


def new_token() -> str:
    """A link token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def bound_state(state: str, browser: str) -> str:
    """What an authorization is kept and found under: its OAuth `state` (which travels in URLs) joined to the random
    value held by the browser that started it (which travels only in that browser's cookie); stored as its digest."""
    return f"{state}.{browser}"


def admit_opener(link: AuthorizationLink | None, *, opener: str | None, now: float) -> Admitted | Refused:
    """May `opener` (the signed-in principal, `None` when nobody is) use `link` at `now`? Who opens it is checked
    first: a person who is not the principal learns nothing about the link's state."""
    if link is None:
        return Refused("unknown")
    if opener is None:
        return Refused("not_signed_in")
    if opener != link.principal:
        return Refused("other_user")
    if link.used_at is not None:
        return Refused("used")
    if now >= link.expires_at:
        return Refused("expired")
    return Admitted(link)


_RENAMED = {"Link": "AuthorizationLink"}

if not TYPE_CHECKING:  # old names are for code not yet moved to the new ones, never for askback's own

    def __getattr__(name: str) -> Any:
        from askback._face import renamed

        return renamed(__name__, _RENAMED, name, globals())
