"""askback as an OAuth 2.1 resource server: the bearer check of `/mcp`, and the metadata that points clients to the
authorization server.

`ResourceServer` is both the `BearerCheck` of the MCP endpoint and the `Extension` that provides it (`Ports(bearer=)`)
and serves the Protected Resource Metadata (RFC 9728) at `/.well-known/oauth-protected-resource` and its
`/mcp`-suffixed form. A token shaped like a JWT is checked as an RFC 9068 access token against the issuer's keys;
another is introspected (RFC 7662) when that is configured, and refused otherwise. The issuer is found once, through
its metadata, at start-up or on the first token; while it cannot be reached, tokens are answered
`IssuerUnavailableError` (503, retryable) and never accepted, and it is asked again at most once per
`jwks_min_interval`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
from pydantic import SecretStr
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from askback.clock import Clock, SystemClock
from askback.core.caller import Caller
from askback.errors import ConfigurationError, InvalidTokenError, IssuerUnavailableError
from askback.extension import ExtensionContext, Mounted, Open, Ports
from askback.identity._discovery import IssuerMetadata, discover
from askback.identity._holdback import HoldBack
from askback.identity._introspection import Introspector
from askback.identity._jwt import DEFAULT_ALGORITHMS, caller_from_claims, looks_like_jwt, precheck_jwt, verify_jwt
from askback.identity._keys import KeyCache
from askback.identity._settings import IdentitySettings, given_settings
from askback.web.asgi import served_origin

if TYPE_CHECKING:
    from askback.db.migrate import Component

__all__ = ["PRM_PATH", "ProtectedResourceMetadata", "ResourceServer"]

logger = logging.getLogger("askback.identity")

PRM_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
_NO_RESOURCE = "set ASKBACK_AUTH_RESOURCE to the URL of /mcp"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class ProtectedResourceMetadata:
    """The RFC 9728 document of `/mcp`, served at the mount's root and at its `/mcp` suffix: GET (or HEAD) only,
    naming the resource from configuration alone (`ResourceServer.resource_url`), else the address the request
    reached (the listening socket's, never its `Host`). Public and cacheable when configured, `no-store` otherwise."""

    def __init__(self, server: ResourceServer) -> None:
        self._server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        path = scope["path"]
        root = scope.get("root_path", "")
        rest = path[len(root) :] if root and path.startswith(root) else path.removeprefix(PRM_PATH)
        response: Response
        if rest.rstrip("/") not in ("", MCP_PATH):
            response = JSONResponse({"error": "not_found"}, status_code=404)
        elif request.method not in ("GET", "HEAD"):
            response = Response(status_code=405, headers={"Allow": "GET, HEAD"})
        elif (base := self._server.resource_url or served_origin(scope)) is None:
            # Served on a Unix socket, with nothing configured: no address names the resource.
            response = JSONResponse({"error": "not_configured", "error_description": _NO_RESOURCE}, status_code=404)
        else:
            cache = "public, max-age=300" if self._server.resource_url is not None else "no-store"
            response = JSONResponse(
                self._server.metadata(base), headers={"Cache-Control": cache, "Access-Control-Allow-Origin": "*"}
            )
        await response(scope, receive, send)


class ResourceServer:
    """The OAuth 2.1 resource server of `/mcp` (see the module's docstring): tokens of `issuer` for `audience`.

    The arguments are the `IdentitySettings` fields (`ResourceServer.from_settings` takes them from the
    environment); `public_url` is where clients reach the server (`ASKBACK_PUBLIC_URL`: the app's, once started,
    when not given), which names `/mcp` when `resource` is not set; `http` is the client for the issuer (made, and
    closed, here when not given), `clock` the time tokens are checked at (the app's, once started, when not given)."""

    name = "identity"
    migrations: Sequence[Component] = ()

    def __init__(
        self,
        *,
        issuer: str,
        audience: str | None = None,
        principal_claim: str = "sub",
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway: float = 60.0,
        jwks_min_interval: float = 30.0,
        accept_jwt_typ: bool = False,
        introspection_url: str | None = None,
        client_id: str | None = None,
        client_secret: str | SecretStr | None = None,
        resource: str | None = None,
        scopes_supported: Sequence[str] = (),
        resource_name: str | None = None,
        public_url: str | None = None,
        http: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        settings = given_settings(
            issuer=issuer,
            audience=audience,
            principal_claim=principal_claim,
            algorithms=tuple(algorithms),
            leeway=leeway,
            jwks_min_interval=jwks_min_interval,
            accept_jwt_typ=accept_jwt_typ,
            introspection_url=introspection_url,
            client_id=client_id,
            client_secret=client_secret,
            resource=resource,
            scopes_supported=tuple(scopes_supported),
        )
        if settings.issuer is None:
            raise ConfigurationError("the resource server needs an issuer: set ASKBACK_AUTH_ISSUER")
        if settings.expected_audience is None:
            raise ConfigurationError(
                "the resource server needs the audience its tokens must name: set ASKBACK_AUTH_AUDIENCE (or "
                "ASKBACK_AUTH_RESOURCE, the URL of /mcp)"
            )
        if settings.introspection_url is not None and (settings.client_id is None or settings.client_secret is None):
            raise ConfigurationError(
                "introspection needs askback's client credentials: set ASKBACK_AUTH_CLIENT_ID and "
                "ASKBACK_AUTH_CLIENT_SECRET"
            )
        self.settings: IdentitySettings = settings
        self.issuer: str = settings.issuer
        self.audience: str = settings.expected_audience
        self.resource_name = resource_name
        self.public_url = public_url.rstrip("/") if public_url else None
        self._owns_http = http is None
        self._http = http if http is not None else httpx.AsyncClient(timeout=_TIMEOUT, follow_redirects=False)
        self._clock_given = clock is not None
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._metadata: IssuerMetadata | None = None
        self._keys: KeyCache | None = None
        self._introspector: Introspector | None = None
        self._discovery_hold: HoldBack | None = None
        self._unavailable_hold: HoldBack | None = None
        self._unavailable_since_warning = 0
        self._lock = asyncio.Lock()

    @classmethod
    def from_settings(
        cls,
        settings: IdentitySettings,
        *,
        resource_name: str | None = None,
        public_url: str | None = None,
        http: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> ResourceServer:
        """The resource server `settings` describe (`load_identity_settings()` reads them from `ASKBACK_AUTH_*`)."""
        if settings.issuer is None:
            raise ConfigurationError("the resource server needs an issuer: set ASKBACK_AUTH_ISSUER")
        values: dict[str, Any] = {name: getattr(settings, name) for name in IdentitySettings.model_fields}
        return cls(**values, resource_name=resource_name, public_url=public_url, http=http, clock=clock)

    # The extension.

    @property
    def mounts(self) -> Sequence[Mounted]:
        return (Mounted(PRM_PATH, ProtectedResourceMetadata(self), Open()),)

    @property
    def ports(self) -> Ports:
        return Ports(bearer=self)

    async def start(self, context: ExtensionContext) -> None:
        """Take the app's clock (unless one was given) and find the issuer and its keys now; when it cannot be
        reached, say so and go on: tokens are answered 503 until it can."""
        if not self._clock_given:
            self._clock = context.clock
        if self.resource_name is None:
            self.resource_name = context.settings.server_name
        if self.public_url is None:
            self.public_url = context.settings.public_url
        try:
            keys = await self._discovered()
            await keys.load()
        except IssuerUnavailableError as exc:
            logger.warning(
                "the issuer %s cannot be reached (%s): bearer tokens of /mcp are answered 503 with Retry-After, never "
                "accepted, until it can; askback asks it again at most once every %g seconds",
                self.issuer,
                exc,
                self.settings.jwks_min_interval,
                extra={"issuer": self.issuer},
            )

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    # The bearer check.

    @property
    def resource_url(self) -> str | None:
        """The URL of `/mcp` configuration names: `ASKBACK_AUTH_RESOURCE`, else the public URL's origin + `/mcp`;
        `None` when neither is set."""
        if self.settings.resource is not None:
            return self.settings.resource
        return f"{_origin(self.public_url)}{MCP_PATH}" if self.public_url else None

    @property
    def resource_metadata_url(self) -> str | None:
        """The metadata document's URL when configuration names the resource (`resource_url`); else the HTTP layer
        builds it from the address the server listens on (`metadata_url_for`), never from a request's `Host`."""
        resource = self.resource_url
        return self.metadata_url_for(resource) if resource is not None else None

    def metadata_url_for(self, base_url: str) -> str:
        """The metadata document's URL on the origin of `base_url`."""
        return f"{_origin(base_url)}{PRM_PATH}{MCP_PATH}"

    def metadata(self, base_url: str) -> dict[str, Any]:
        """The Protected Resource Metadata document (RFC 9728), for a request to `base_url`'s origin."""
        document: dict[str, Any] = {
            "resource": self.resource_url or f"{_origin(base_url)}{MCP_PATH}",
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        }
        if self.settings.scopes_supported:
            document["scopes_supported"] = list(self.settings.scopes_supported)
        if self.resource_name:
            document["resource_name"] = self.resource_name
        return document

    def describe(self) -> str:
        line = (
            f"OAuth 2.1 resource server: JWT access tokens of {self.issuer} for audience {self.audience} "
            f"(principal claim {self.settings.principal_claim})"
        )
        if self.settings.introspection_url is not None or self.settings.client_id is not None:
            line += ", opaque tokens by introspection"
        return line

    async def verify(self, token: str) -> Caller:
        """The caller `token` names; `InvalidTokenError` when it is not accepted, `IssuerUnavailableError` when it
        cannot be checked now (said in the log at most once per `jwks_min_interval`, however many are refused)."""
        try:
            return await self._verify(token)
        except IssuerUnavailableError as exc:
            self._unavailable(exc)
            raise

    def _warned_unavailable(self) -> HoldBack:
        if self._unavailable_hold is None:
            self._unavailable_hold = HoldBack(self._clock, self.settings.jwks_min_interval)
        return self._unavailable_hold

    def _unavailable(self, exc: IssuerUnavailableError) -> None:
        """Log a token answered 503, once per interval: a flood of tokens while the issuer is down is one line."""
        self._unavailable_since_warning += 1
        hold = self._warned_unavailable()
        if not hold.allows():
            return
        hold.tried()
        count, self._unavailable_since_warning = self._unavailable_since_warning, 0
        logger.warning(
            "the issuer %s cannot be asked (%s): %d bearer token(s) answered 503 since the last such line",
            self.issuer,
            exc,
            count,
            extra={"issuer": self.issuer, "refused": count},
        )

    async def _verify(self, token: str) -> Caller:
        settings = self.settings
        if looks_like_jwt(token):
            # The refusals that need no key come before any request to the issuer.
            precheck_jwt(token, issuer=self.issuer, algorithms=settings.algorithms)
            keys = await self._discovered()
            claims = await verify_jwt(
                token,
                keys=keys,
                issuer=settings.issuer,
                audience=settings.expected_audience,
                algorithms=settings.algorithms,
                principal_claim=settings.principal_claim,
                leeway=settings.leeway,
                accept_jwt_typ=settings.accept_jwt_typ,
                now=self._clock.now(),
            )
            return caller_from_claims(claims, principal_claim=settings.principal_claim, issuer=self.issuer)
        if not token or token.strip() != token:
            raise InvalidTokenError("the token is empty or malformed")
        introspector = await self._introspection()
        if introspector is None:
            raise InvalidTokenError("the token is not a JWT access token, and askback checks only those")
        answer = await introspector.introspect(token)
        return caller_from_claims(answer, principal_claim=settings.principal_claim, issuer=self.issuer)

    # The issuer, found once.

    async def _discovered(self) -> KeyCache:
        if self._keys is not None:
            return self._keys
        async with self._lock:
            if self._keys is not None:
                return self._keys
            interval = self.settings.jwks_min_interval
            if self._discovery_hold is None:
                self._discovery_hold = HoldBack(self._clock, interval)
            hold = self._discovery_hold
            if not hold.allows():
                raise IssuerUnavailableError(
                    f"the issuer {self.issuer} could not be reached; askback tries again shortly",
                    retry_after=hold.retry_after(),
                )
            hold.tried()
            metadata = await discover(self._http, self.issuer)
            self._metadata = metadata
            self._keys = KeyCache(self._http, metadata.jwks_uri, clock=self._clock, min_interval=interval)
            return self._keys

    async def _introspection(self) -> Introspector | None:
        settings = self.settings
        if self._introspector is not None:
            return self._introspector
        if settings.client_id is None or settings.client_secret is None:
            return None
        url = settings.introspection_url
        if url is None:
            await self._discovered()
            assert self._metadata is not None
            url = self._metadata.introspection_endpoint
            if url is None:
                return None
        self._introspector = Introspector(
            self._http,
            url,
            client_id=settings.client_id,
            client_secret=settings.client_secret.get_secret_value(),
            issuer=self.issuer,
            audience=self.audience,
            principal_claim=settings.principal_claim,
            clock=self._clock,
        )
        return self._introspector
