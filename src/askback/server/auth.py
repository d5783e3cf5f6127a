"""Who may reach which route: one auth policy per mounted route, and bearer authentication for the MCP endpoint.

- `Bearer()`: an `Authorization: Bearer <token>` header checked by the server's `BearerCheck` (an OAuth 2.1
  resource server such as `askback.identity.ResourceServer`, or an SDK `TokenVerifier` wrapped in
  `SdkVerifierCheck`); the `Caller` it names (principal and issuer) feeds the SDK's binding of `requestState` to its
  user. The MCP endpoint's policy, and the default for a mount. Refusals carry an RFC 6750 challenge: 401 `Bearer
  resource_metadata="..."` without an `error` when no token was sent, `error="invalid_token"` for a token that is
  not accepted, 503 with `Retry-After` when the issuer cannot be asked; a tool's missing scopes are 403
  `error="insufficient_scope"` (`http.py`).
- `Open()`: no credentials (health probes; a hosted page that does its own sign-in check).
- `Signed(verify)`: no bearer token; `verify(headers, body)` must accept the request's signature (webhooks), or it
  is refused with 401 before the mounted app sees it.

The policies themselves are values of `askback.extension`, so that any product can say how its routes are reached.

With demo authentication (`DemoTokenVerifier`), a token `demo-<name>` is user `<name>` and a request without a
token is the user `anonymous`, so state minted for a signed-in user is refused to an anonymous caller and the other
way round.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from askback.core.caller import Caller, actors_of, checked_principal, checked_scopes, principal_of
from askback.errors import AskbackError, InvalidTokenError, IssuerUnavailableError
from askback.extension import AuthPolicy, Bearer, BearerCheck, Open, Signed

__all__ = ["ANONYMOUS", "AuthPolicy", "Bearer", "DemoTokenVerifier", "Open", "SdkVerifierCheck", "Signed"]

logger = logging.getLogger("askback.auth")

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


class SdkVerifierCheck:
    """A `BearerCheck` over a verifier written to the SDK's `TokenVerifier` protocol (`--token-verifier`, the demo's):
    `None` from it is an invalid token. The issuer is the `iss` of the `claims` it returns, where it gives one: a
    verifier that accepts several issuers returns it, and each issuer's subjects are then principals of their own
    (`askback.core.caller.principal_of`; `home_issuer`'s stay bare)."""

    resource_metadata_url: str | None = None

    def __init__(self, verifier: TokenVerifier, description: str, *, home_issuer: str | None = None) -> None:
        self.verifier = verifier
        self.description = description
        self.home_issuer = home_issuer

    async def verify(self, token: str) -> Caller:
        try:
            info = await self.verifier.verify_token(token)
        except AskbackError:
            raise
        except Exception as exc:
            # A deployment's verifier that raises has not accepted the token; what it raised goes to the log only.
            logger.warning("the token verifier raised %s", type(exc).__name__, exc_info=True)
            raise InvalidTokenError("the bearer token was not accepted") from exc
        if info is None:
            raise InvalidTokenError("the bearer token was not accepted")
        issuer = (info.claims or {}).get("iss")
        if issuer is not None and not isinstance(issuer, str):
            raise InvalidTokenError("the token verifier named an issuer that is not a string")
        try:
            principal = principal_of(checked_principal(info.subject or info.client_id), issuer, home=self.home_issuer)
        except ValueError as exc:
            raise InvalidTokenError(f"the token names no usable principal: {exc}") from None
        return Caller(
            principal=principal,
            scopes=frozenset(info.scopes),
            client_id=info.client_id,
            issuer=issuer,
            expires_at=info.expires_at,
            # Whoever acts for the principal (a token exchange's `act` chain), however the token was checked: the
            # approvals refuse them as approvers of the principal's requests.
            actors=actors_of(info.claims or {}, issuer=issuer, home=self.home_issuer),
        )

    def describe(self) -> str:
        return self.description


# The claim of the SDK's access token that carries the caller's actors, spelled as `Caller.actors` spells them: a
# name of askback's own, so that no claim of a token's is taken for it (a token's own claims never reach this token).
_ACTORS = "askback:actors"


def access_token_of(caller: Caller) -> AccessToken:
    """The SDK's view of `caller`, which its `requestState` binding, its session ownership and `get_access_token()`
    read: the principal as `subject`, and the issuer as `claims["iss"]`, the one place the SDK's binding
    (`principal_components`) reads an issuer from. Who acts for the principal rides along under `_ACTORS`, already
    spelled, so that `caller_of` gives every tool call the caller's actors (an approval refuses them as approvers).
    The token itself is never kept: its place holds a marker."""
    claims: dict[str, Any] = {}
    if caller.issuer is not None:
        claims["iss"] = caller.issuer
    if caller.actors:
        claims[_ACTORS] = list(caller.actors)
    return AccessToken(
        token="verified",
        client_id=caller.client_id or caller.principal,
        scopes=sorted(caller.scopes),
        expires_at=caller.expires_at,
        subject=caller.principal,
        claims=claims or None,
    )


def caller_of(token: AccessToken | None) -> Caller | None:
    """The `Caller` the SDK's access token of this request stands for (`None` on an unauthenticated transport)."""
    if token is None:
        return None
    claims = token.claims or {}
    issuer = claims.get("iss")
    actors = claims.get(_ACTORS)
    return Caller(
        principal=token.subject or token.client_id,
        scopes=frozenset(token.scopes),
        client_id=token.client_id,
        issuer=issuer if isinstance(issuer, str) else None,
        expires_at=token.expires_at,
        actors=tuple(str(actor) for actor in actors) if isinstance(actors, list) else (),
    )


class Unauthenticated(AuthenticationError):
    """Why a request is refused before it reaches a route: the challenge it is answered with."""

    def __init__(self, message: str, *, error: str | None, status: int = 401, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.error = error
        self.status = status
        self.retry_after = retry_after


class BearerBackend(AuthenticationBackend):
    """Bearer authentication for the routes whose policy is `Bearer`; every other route passes unauthenticated
    (a `Signed` route is checked by its own guard)."""

    def __init__(
        self, check: BearerCheck, *, allow_anonymous: bool, policies: Sequence[tuple[str, AuthPolicy]]
    ) -> None:
        self.check = check
        self.allow_anonymous = allow_anonymous
        self.policies = tuple(policies)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, AuthenticatedUser] | None:
        # The path as `conn.url.path` spells it, without building the whole URL for every request.
        path = conn.scope["path"].replace("?", "%3F").replace("#", "%23").replace("\\", "%5C")
        if not isinstance(policy_for(path, self.policies), Bearer):
            return None
        given = conn.headers.getlist("authorization")
        if len(given) > 1:
            # Two credentials are two readings of who is calling: a proxy may check one and askback the other.
            raise Unauthenticated("send one Authorization header, not several", error="invalid_request", status=400)
        header = given[0] if given else None
        if not header:
            if not self.allow_anonymous:
                # RFC 6750 section 3.1: no error code when the request carried no credentials at all.
                raise Unauthenticated("this server needs an Authorization: Bearer <token> header", error=None)
            anonymous = AccessToken(token="anonymous", client_id="anonymous", subject=ANONYMOUS, scopes=[])
            return AuthCredentials([]), AuthenticatedUser(anonymous)
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            # Credentials of another scheme are no bearer token: challenged as a request without one.
            raise Unauthenticated("use an Authorization: Bearer <token> header", error=None)
        try:
            caller = await self.check.verify(token.strip())
            # A deployment's own check is held to the same names and scopes as askback's.
            checked_principal(caller.principal)
            checked_scopes(caller.scopes)
        except InvalidTokenError as exc:
            raise Unauthenticated(str(exc), error="invalid_token") from None
        except IssuerUnavailableError as exc:
            raise Unauthenticated(str(exc), error=None, status=503, retry_after=exc.retry_after) from None
        return AuthCredentials(sorted(caller.scopes)), AuthenticatedUser(access_token_of(caller))


def challenge(
    *, error: str | None, description: str | None, metadata_url: str | None, scope: Sequence[str] = ()
) -> str:
    """A `WWW-Authenticate: Bearer ...` value (RFC 6750 section 3, RFC 9728 section 5.1): `error` and its
    description only when there is one, the scopes needed, and where the resource's metadata is."""
    params: list[tuple[str, str]] = []
    if error is not None:
        params.append(("error", error))
        if description:
            params.append(("error_description", description))
    if scope:
        params.append(("scope", " ".join(scope)))
    if metadata_url is not None:
        params.append(("resource_metadata", metadata_url))
    if not params:
        return "Bearer"
    return "Bearer " + ", ".join(f'{name}="{_quoted(value)}"' for name, value in params)


def _quoted(value: str) -> str:
    # A quoted-string of RFC 9110 carries no control characters; quotes and backslashes are escaped.
    printable = "".join(c if 0x20 <= ord(c) < 0x7F else "?" for c in value)
    return printable.replace("\\", "\\\\").replace('"', '\\"')


def auth_error_for(
    metadata_url: Callable[[HTTPConnection], str | None],
) -> Callable[[HTTPConnection, Exception], Response]:
    """The `on_error` of the authentication middleware: the refusal with its challenge."""

    def refuse(conn: HTTPConnection, exc: Exception) -> Response:
        refusal = exc if isinstance(exc, Unauthenticated) else Unauthenticated(str(exc), error="invalid_token")
        body: dict[str, object] = {"error_description": str(refusal)}
        if refusal.error is not None:
            body = {"error": refusal.error, **body}
        headers: dict[str, str] = {}
        if refusal.status == 503:
            headers["Retry-After"] = str(refusal.retry_after or 5)
        else:
            headers["WWW-Authenticate"] = challenge(
                error=refusal.error, description=str(refusal), metadata_url=metadata_url(conn)
            )
        return JSONResponse(body, status_code=refusal.status, headers=headers)

    return refuse
