"""Who may reach which route: one auth policy per mounted route, and bearer authentication for the MCP endpoint.

- `Bearer()`: an `Authorization: Bearer <token>` header checked by the server's `TokenVerifier` (the SDK's
  protocol); the principal it names feeds the SDK's binding of `requestState` to its user. The MCP endpoint's
  policy, and the default for a mount.
- `Open()`: no credentials (health probes; a hosted page that does its own sign-in check).
- `Signed(verify)`: no bearer token; `verify(headers, body)` must accept the request's signature (webhooks), or it
  is refused with 401 before the mounted app sees it.

The policies themselves are values of `askback.extension`, so that any product can say how its routes are reached.

With demo authentication (`DemoTokenVerifier`), a token `demo-<name>` is user `<name>` and a request without a
token is the user `anonymous`, so state minted for a signed-in user is refused to an anonymous caller and the other
way round.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from askback.extension import AuthPolicy, Bearer, Open, Signed

__all__ = ["ANONYMOUS", "AuthPolicy", "Bearer", "DemoTokenVerifier", "Open", "Signed"]

ANONYMOUS = "anonymous"
_DEMO_TOKEN = re.compile(r"^demo-([A-Za-z0-9_.\-]{1,64})$")


class DemoTokenVerifier:
    """Demo authentication: `demo-<name>` is user `<name>`. Never use it where the users are real."""

    async def verify_token(self, token: str) -> AccessToken | None:
        match = _DEMO_TOKEN.match(token)
        if match is None:
            return None
        return AccessToken(token="demo", client_id="askback-demo", subject=match.group(1), scopes=[])


def policy_for(path: str, policies: Sequence[tuple[str, AuthPolicy]]) -> AuthPolicy:
    """The policy of the longest route prefix that `path` falls under; `Bearer()` when none does."""
    best: tuple[int, AuthPolicy] = (-1, Bearer())
    for prefix, policy in policies:
        if (path == prefix or path.startswith(prefix.rstrip("/") + "/")) and len(prefix) > best[0]:
            best = (len(prefix), policy)
    return best[1]


class BearerBackend(AuthenticationBackend):
    """Bearer authentication for the routes whose policy is `Bearer`; every other route passes unauthenticated
    (a `Signed` route is checked by its own guard)."""

    def __init__(
        self, verifier: TokenVerifier, *, allow_anonymous: bool, policies: Sequence[tuple[str, AuthPolicy]]
    ) -> None:
        self.verifier = verifier
        self.allow_anonymous = allow_anonymous
        self.policies = tuple(policies)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, AuthenticatedUser] | None:
        if not isinstance(policy_for(conn.url.path, self.policies), Bearer):
            return None
        header = conn.headers.get("authorization")
        if not header:
            if not self.allow_anonymous:
                raise AuthenticationError("this server needs an Authorization: Bearer <token> header")
            anonymous = AccessToken(token="anonymous", client_id="anonymous", subject=ANONYMOUS, scopes=[])
            return AuthCredentials([]), AuthenticatedUser(anonymous)
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError("use an Authorization: Bearer <token> header")
        info = await self.verifier.verify_token(token.strip())
        if info is None:
            raise AuthenticationError("the bearer token was not accepted")
        return AuthCredentials(info.scopes), AuthenticatedUser(info)


def auth_error(conn: HTTPConnection, exc: Exception) -> Response:
    return JSONResponse(
        {"error": "invalid_token", "error_description": str(exc)},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )
