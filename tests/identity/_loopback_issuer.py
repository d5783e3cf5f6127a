"""A small authorization server of the tests' own, on loopback, for the resource server to trust or distrust.

It serves its OpenID Connect configuration, its JWKS (counting the fetches, and able to rotate and retire keys) and
an RFC 7662 introspection endpoint (answering from a table the test fills), and signs tokens with joserfc. It runs
under uvicorn in a thread of its own on a socket bound before it starts, so a test can hold the address while the
issuer is still down (connections are refused) and bring it up later.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import secrets
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from joserfc import jwt
from joserfc.jwk import RSAKey
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from askback.clock import FrozenClock
from askback.identity import ResourceServer
from infra import wait_until

AUDIENCE = "https://askback.test/mcp"


def new_key() -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": secrets.token_hex(8), "use": "sig", "alg": "RS256"})


def bound_socket() -> socket.socket:
    """A socket bound to a free loopback port, not yet listening: connections to it are refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def serving_in_thread(app: ASGIApp, sock: socket.socket) -> Iterator[None]:
    """Serve `app` on `sock` under uvicorn in a thread until the block ends."""
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", timeout_graceful_shutdown=2))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), timeout=10, what="the loopback server to start")
        assert server.started, "the loopback server did not start"
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class _Counting:
    def __init__(self, app: ASGIApp, issuer: LoopbackIssuer) -> None:
        self._app = app
        self._issuer = issuer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self._issuer.requests += 1
            if self._issuer.failing is not None:
                await Response("the issuer is failing", status_code=self._issuer.failing)(scope, receive, send)
                return
        await self._app(scope, receive, send)


@dataclass
class LoopbackIssuer:
    """The issuer at `http://127.0.0.1:<port>`: its published keys (`published`), the key it signs with
    (`signing`), what it has been asked (`requests`, `jwks_fetches`, `introspections`), what its introspection
    endpoint answers for each token (`introspection`), and the status it answers everything with while it is
    `failing`."""

    sock: socket.socket
    signing: RSAKey = field(default_factory=new_key)
    published: list[RSAKey] = field(default_factory=list)
    introspection: dict[str, dict[str, Any]] = field(default_factory=dict)
    client_id: str = "askback"
    client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    requests: int = 0
    jwks_fetches: int = 0
    introspections: int = 0
    failing: int | None = None  # a status every request is answered with, while set
    token_requests: int = 0
    token_failing: int | None = None  # a status the token endpoint answers with, while set (else invalid_grant)

    def __post_init__(self) -> None:
        if not self.published:
            self.published = [self.signing]

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def rotate(self, *, keep_previous: bool = True) -> RSAKey:
        """Sign with a new key from now on, still publishing the previous one unless told not to."""
        previous, self.signing = self.signing, new_key()
        self.published = [self.signing, *([previous] if keep_previous else [])]
        return previous

    def retire(self, key: RSAKey) -> None:
        self.published = [k for k in self.published if k.kid != key.kid]

    def sign(self, claims: dict[str, Any], *, key: RSAKey | None = None, **header: Any) -> str:
        key = key or self.signing
        return jwt.encode({"alg": "RS256", "kid": key.kid, "typ": "at+jwt", **header}, claims, key)

    def claims(self, now: float, *, ttl: float = 300, **overrides: Any) -> dict[str, Any]:
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": AUDIENCE,
            "sub": "alice",
            "client_id": "the-client",
            "scope": "openid notes",
            "iat": int(now),
            "exp": int(now + ttl),
            "jti": secrets.token_hex(8),
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not None}

    def access_token(self, now: float, **overrides: Any) -> str:
        return self.sign(self.claims(now, **overrides))

    def app(self) -> ASGIApp:
        async def configuration(request: Request) -> Response:
            return JSONResponse(
                {
                    "issuer": self.issuer,
                    "jwks_uri": f"{self.issuer}/jwks",
                    "authorization_endpoint": f"{self.issuer}/auth",
                    "token_endpoint": f"{self.issuer}/token",
                    "introspection_endpoint": f"{self.issuer}/introspect",
                }
            )

        async def jwks(request: Request) -> Response:
            self.jwks_fetches += 1
            return JSONResponse({"keys": [key.as_dict(private=False) for key in self.published]})

        async def introspect(request: Request) -> Response:
            self.introspections += 1
            expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
            if request.headers.get("authorization") != f"Basic {expected}":
                return JSONResponse({"error": "invalid_client"}, status_code=401)
            form = await request.form()
            return JSONResponse(self.introspection.get(str(form.get("token")), {"active": False}))

        async def token(request: Request) -> Response:
            self.token_requests += 1
            if self.token_failing is not None:
                return Response("the token endpoint is failing", status_code=self.token_failing)
            return JSONResponse({"error": "invalid_grant"}, status_code=400)

        routes = [
            Route("/.well-known/openid-configuration", configuration),
            Route("/token", token, methods=["POST"]),
            Route("/jwks", jwks),
            Route("/introspect", introspect, methods=["POST"]),
        ]
        return _Counting(Starlette(routes=routes), self)

    @contextlib.contextmanager
    def up(self) -> Iterator[LoopbackIssuer]:
        with serving_in_thread(self.app(), self.sock):
            yield self


@contextlib.contextmanager
def loopback_issuer(*, up: bool = True) -> Iterator[LoopbackIssuer]:
    """An issuer on a port of its own, serving until the block ends when `up` (else down until `issuer.up()`)."""
    sock = bound_socket()
    issuer = LoopbackIssuer(sock)
    try:
        if up:
            with issuer.up():
                yield issuer
        else:
            yield issuer
    finally:
        sock.close()


CLIENT_ID = "0b6c5a1e-askback-api"  # the audience of the documented Entra recipe: a client id


def resource_server(issuer: LoopbackIssuer, clock: FrozenClock, *, accept_jwt_typ: bool = False) -> ResourceServer:
    """A resource server of `issuer` whose audience is a client id (the documented Entra recipe), introspecting
    opaque tokens."""
    return ResourceServer(
        issuer=issuer.issuer,
        audience=CLIENT_ID,
        clock=clock,
        accept_jwt_typ=accept_jwt_typ,
        client_id=issuer.client_id,
        client_secret=issuer.client_secret,
    )
