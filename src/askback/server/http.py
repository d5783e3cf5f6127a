"""The HTTP application for an `Askback` server: Streamable HTTP at `/mcp` (2026-07-28, stateless), health at
`/healthz` and `/readyz`, the serving instance in an `X-Askback-Instance` response header, bearer authentication
that feeds the SDK's principal binding of `requestState`, and any further routes mounted with their own auth
policy (`Mounted`: hosted pages, OAuth callbacks, webhooks; see `auth.py`).

Authentication: pass a `TokenVerifier` (the SDK's protocol) to check real tokens, and a request without one is
refused (401); with `demo_auth` (the demo server), a token `demo-<name>` is user `<name>` and a request without a
token is the user `anonymous`.

Hosts: every request but the probes' is refused (421) unless its `Host` is one the server is configured for
(`askback.web.asgi.HostGuard`: the loopback names, `ASKBACK_PUBLIC_URL`'s host, the configured resource's, each mount's
`public_url`'s and `ASKBACK_ALLOWED_HOSTS`), and a request to `/mcp` whose `Origin` is on another host is refused
(403). The SDK's own host and origin check is off: this one decides, so that the two never disagree.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.provider import TokenVerifier
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp

from askback.audit.emit import instance_id
from askback.errors import AskbackError, DefinitionError
from askback.extension import BearerCheck, Mounted
from askback.server._http_guards import (
    EraGuard,
    InstanceHeader,
    ScopeGuard,
    SignedOnly,
    TaskNameGuard,
    VersionHeaderRequired,
)
from askback.server._listen_streams import CloseListenStreams, ListenStreams
from askback.server._sdk_http import answer_modern_requests_as_json
from askback.server.app import Askback
from askback.server.auth import (
    AuthPolicy,
    BearerBackend,
    DemoTokenVerifier,
    Open,
    SdkVerifierCheck,
    Signed,
    auth_error_for,
)
from askback.server.heap import frozen_while_running
from askback.web.asgi import API_HEADERS, AllowedHosts, HostGuard, OriginGuard, SecurityHeaders, served_origin

__all__ = ["DemoTokenVerifier", "Mounted", "build_app"]

logger = logging.getLogger("askback")

_MCP_PATH = "/mcp"
# Where RFC 9728 puts the Protected Resource Metadata of `/mcp` (the resource's path appended to the well-known one).
PRM_PATH = "/.well-known/oauth-protected-resource"
_PROBES: tuple[tuple[str, AuthPolicy], ...] = (("/healthz", Open()), ("/readyz", Open()))
# The SDK's DNS rebinding check, which knows only the loopback names, is off: `HostGuard` and `OriginGuard` decide.
_NO_SDK_HOST_CHECK = TransportSecuritySettings(enable_dns_rebinding_protection=False)


def bearer_check(
    server: Askback, *, bearer: BearerCheck | None = None, token_verifier: TokenVerifier | None = None
) -> BearerCheck | None:
    """What checks the bearer tokens of `server`'s `/mcp` (see `build_app`); `None` when nothing does."""
    if bearer is not None:
        return bearer
    if server.ports.bearer is not None:
        return server.ports.bearer
    if token_verifier is not None:
        name = getattr(token_verifier, "__qualname__", type(token_verifier).__qualname__)
        return SdkVerifierCheck(token_verifier, f"the token verifier {name}")
    if server.settings.demo_auth:
        return SdkVerifierCheck(
            DemoTokenVerifier(), "demo tokens (demo-<name> is the user <name>; never for real users)"
        )
    return None


class _Beneath(Mount):
    """A `Mount` that takes every path beneath its own, a line break in it too. Starlette's `path` convertor stops at
    one, so such a path would miss the mounted pages and get the server's bare 404, without the pages' headers."""

    def __init__(self, path: str, app: ASGIApp) -> None:
        super().__init__(path, app=app)
        self.path_regex = re.compile(f"^{re.escape(self.path)}/(?P<path>.*)\\Z", re.DOTALL)


def _routes_of(mounted: Mounted) -> list[Route | Mount]:
    """The routes of a mount: everything under its path, and the path itself (which a Starlette `Mount` does not
    match: RFC 9728's `/.well-known/oauth-protected-resource` is a document, not a folder)."""
    app = SignedOnly(mounted.app, mounted.auth) if isinstance(mounted.auth, Signed) else mounted.app
    path = mounted.path.rstrip("/")
    return [Route(path, app), _Beneath(path, app)]


def _metadata_url(
    check: BearerCheck | None, *, served: bool, public_url: str | None
) -> Callable[[HTTPConnection], str | None]:
    """Where a challenge points for the resource's metadata: the check's own URL, else the document this app serves,
    on the public URL's origin or else the address the request reached (never its `Host`), else nowhere."""

    def url(conn: HTTPConnection) -> str | None:
        if check is not None and check.resource_metadata_url is not None:
            return check.resource_metadata_url
        if not served:
            return None
        origin = _origin(public_url) if public_url else served_origin(conn.scope)
        return f"{origin}{PRM_PATH}{_MCP_PATH}" if origin is not None else None

    return url


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _answered_hosts(
    server: Askback, check: BearerCheck | None, mounts: Sequence[Mounted], more: Sequence[str] = ()
) -> AllowedHosts:
    """The hosts `server`'s app answers: the loopback names, `ASKBACK_ALLOWED_HOSTS` and `more`, and the hosts of its
    public URL, of the resource its metadata names and of each mount's `public_url`."""
    resource = check.resource_metadata_url if check is not None else None
    return AllowedHosts.configured(server.settings, more, urls=[resource, *(m.public_url for m in mounts)])


def build_app(
    server: Askback,
    *,
    token_verifier: TokenVerifier | None = None,
    bearer: BearerCheck | None = None,
    host: str = "127.0.0.1",
    json_response: bool = False,
    allow_anonymous: bool | None = None,
    mounts: Sequence[Mounted] = (),
    hosts: Sequence[str] = (),
) -> Starlette:
    """The ASGI app serving `server`. The store is opened before the first request is taken.

    Bearer tokens are checked by `bearer`, else by the app's own bearer port (an extension such as
    `askback.identity.ResourceServer`), else by `token_verifier` (the SDK's protocol), else, with `demo_auth`, by
    the demo's; with none of them requests are not authenticated. `allow_anonymous` (default: only with demo
    authentication) serves requests without a token as the user `anonymous`; otherwise they get 401. `mounts` adds
    routes beside `/mcp`, each under its own auth policy, after the server's own (`server.mounts`: its `mounts=` and
    its extensions'); one of those given again is served once. `hosts` are further hosts to answer, beside those of
    the configuration (see the module's docstring); `host` is the address the server listens on.
    """
    given = [*server.mounts, *mounts]
    mounts = [m for i, m in enumerate(given) if m not in given[:i]]
    paths = [m.path.rstrip("/") for m in mounts]
    if len(set(paths)) != len(paths):
        raise DefinitionError(f"two mounts share a path: {sorted(p for p in paths if paths.count(p) > 1)}")
    check = bearer_check(server, bearer=bearer, token_verifier=token_verifier)
    if allow_anonymous is None:
        allow_anonymous = bearer is None and server.ports.bearer is None and token_verifier is None
    served = any(m.path.rstrip("/") == PRM_PATH for m in mounts)
    metadata_url = _metadata_url(check, served=served, public_url=server.settings.public_url)
    answered = _answered_hosts(server, check, mounts, hosts)
    # 2026-07-28 requests are served statelessly whatever this says; a 2025-11-25 client that sends `initialize`
    # gets a session (stateful, streamed), which is how its questions can be pushed to it.
    mcp_app = server.mcp.streamable_http_app(
        streamable_http_path=_MCP_PATH,
        stateless_http=False,
        json_response=json_response,
        host=host,
        transport_security=_NO_SDK_HOST_CHECK,
    )
    # Modern requests are answered as JSON either way (no stream to open for one answer); sessions keep theirs.
    answer_modern_requests_as_json(server.mcp.session_manager)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "instance": instance_id()})

    async def readyz(request: Request) -> Response:
        """Ready when the database answers, its schema is current, and a shared key ring is configured."""
        problems: list[str] = []
        try:
            store = await server.store()
            await store.database.ping()
            if await store.database.schema_behind():
                problems.append("the database schema is older than this release needs: run `askback db upgrade`")
        except AskbackError:
            # The details (host, user, database) go to the log, not to an unauthenticated probe.
            logger.warning("readiness: the database is unavailable", exc_info=True)
            problems.append("the database is unavailable")
        if server.ephemeral_keys:
            problems.append("no ASKBACK_STATE_KEYS: answers cannot be taken by another instance")
        if problems:
            return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ready", "instance": instance_id()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await server.store()
        async with mcp_app.router.lifespan_context(mcp_app):
            with frozen_while_running(server.settings.gc_freeze):
                yield
        await server.aclose()

    # Closed by whoever runs the app when it begins to stop (`askback serve` does): see `_listen_streams`.
    streams = ListenStreams()
    policies = [*_PROBES, *((m.path.rstrip("/"), m.auth) for m in mounts)]
    middleware: list[Middleware] = [
        # JSON answers and the framework's own 404 and 405 get the headers too; a mounted page keeps its own policy.
        Middleware(SecurityHeaders, headers=API_HEADERS, missing_only=True),
        Middleware(InstanceHeader),
        Middleware(HostGuard, allowed=answered, exempt=[path for path, _ in _PROBES]),
        Middleware(OriginGuard, path=_MCP_PATH, allowed=answered),
        Middleware(EraGuard),
        Middleware(TaskNameGuard),
        Middleware(VersionHeaderRequired, path=_MCP_PATH),
        Middleware(CloseListenStreams, path=_MCP_PATH, streams=streams),
    ]
    if check is not None:
        middleware += [
            Middleware(
                AuthenticationMiddleware,
                backend=BearerBackend(check, allow_anonymous=allow_anonymous, policies=policies),
                on_error=auth_error_for(metadata_url),
            ),
            Middleware(AuthContextMiddleware),
        ]
    middleware.append(
        Middleware(
            ScopeGuard,
            path=_MCP_PATH,
            scopes=server.tool_scopes,
            metadata_url=metadata_url,
            meta=server.expose != "direct",
        )
    )
    routes: list[Any] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        *(route for m in mounts for route in _routes_of(m)),
        Mount("/", app=mcp_app),
    ]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.listen_streams = streams
    return app
