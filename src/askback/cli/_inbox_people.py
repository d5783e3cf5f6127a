"""Who opens a page of `askback inbox serve`: the one `--user`, the `--user-header` a signing-in proxy sets, or people
signed in at `--auth-issuer` with OpenID Connect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from askback.identity import PeopleSignIn

__all__ = ["InboxPeople", "inbox_people"]


@dataclass(frozen=True)
class InboxPeople:
    """`principal` names who opens a page; `sign_in` is the people's sign-in behind it (started with the inbox's
    store), if any; `notice` is a line to print once the inbox starts."""

    principal: Any
    sign_in: PeopleSignIn | None = None
    notice: str | None = None


def inbox_people(
    user: str | None, user_header: str | None, issuer: str | None, client_id: str | None, served_at: str
) -> InboxPeople:
    """Who opens an inbox page: the one `--user`, the `--user-header` a proxy sets, or people signed in at
    `--auth-issuer` (`askback.identity.PeopleSignIn`). Everything is checked here, before anything is said."""
    import os
    import secrets

    from starlette.requests import Request

    if issuer is not None and client_id is not None:
        from pydantic import SecretStr

        from askback.errors import ConfigurationError
        from askback.identity import PeopleSignIn

        client_secret = os.environ.get("ASKBACK_SIGNIN_CLIENT_SECRET", "")
        if not client_secret:
            raise ConfigurationError(
                "--auth-issuer needs the inbox's client secret at the issuer: set ASKBACK_SIGNIN_CLIENT_SECRET."
            )
        session_secret = os.environ.get("ASKBACK_SESSION_SECRET", "")
        notice = None
        if not session_secret:
            notice = (
                "askback inbox: ASKBACK_SESSION_SECRET is not set, so a session secret was made at start-up: "
                "everyone's sign-in ends when the inbox restarts"
            )
        sign_in = PeopleSignIn(
            issuer=issuer,
            client_id=client_id,
            client_secret=SecretStr(client_secret),
            base_url=os.environ.get("ASKBACK_PUBLIC_URL", "").strip() or served_at,
            session_secret=SecretStr(session_secret or secrets.token_urlsafe(32)),
            principal_claim=os.environ.get("ASKBACK_AUTH_PRINCIPAL_CLAIM", "").strip() or "sub",
        )
        return InboxPeople(sign_in, sign_in, notice)

    def named(request: Request) -> str | None:
        if user is not None:
            return user
        assert user_header is not None
        return request.headers.get(user_header) or None

    return InboxPeople(named)
