"""Demo Mail's app: its endpoints over the Authlib server (`DevProvider`), and `serving_provider` to run one on
loopback."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import uvicorn
from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.oauth2.rfc6749 import OAuth2Error, ResourceProtector  # type: ignore[import-untyped]
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from askback.clock import Clock, SystemClock
from askback.demo.ports import loopback_socket
from askback.demo.provider._authlib import BearerValidator, ProviderRequest, Server
from askback.demo.provider._pages import consent_page, problem_page
from askback.demo.provider._storage import (
    AUTHORIZE_PATH,
    CLIENT_ID,
    MAX_BODY_BYTES,
    MESSAGES_PATH,
    NAME,
    PAGE_SECONDS,
    SCOPE,
    TOKEN_PATH,
    Client,
    Memory,
)

__all__ = ["DevProvider", "mailbox", "serving_provider"]

_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def _response(answered: object) -> Response:
    """What Authlib answered, through `Server.handle_response`: a Starlette response."""
    assert isinstance(answered, Response)
    return answered


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def mailbox(user: str) -> list[dict[str, Any]]:
    """The fake messages of `user`, newest first."""
    return [
        {"from": "ops@example.com", "subject": "web-frontend is live in production", "unread": True},
        {"from": "dana@example.com", "subject": "Lunch on Thursday?", "unread": True},
        {"from": "mail@example.com", "subject": f"Welcome to {NAME}, {user}", "unread": False},
    ]


class DevProvider:
    """Demo Mail at `issuer` (its base URL), with one confidential client (`client_id`, `client_secret`, the exact
    `redirect_uris`). `app` is the ASGI app; `serving_provider` runs one on loopback."""

    def __init__(
        self,
        *,
        issuer: str,
        client_secret: str,
        redirect_uris: Sequence[str],
        client_id: str = CLIENT_ID,
        clock: Clock | None = None,
        new_token: Callable[[int], str] = generate_token,
    ) -> None:
        self.issuer = issuer.rstrip("/")
        self.client_id = client_id
        self.memory = Memory(clock or SystemClock())
        self.memory.clients[client_id] = Client(client_id, client_secret, tuple(redirect_uris))
        self.new_token = new_token
        self.server = Server(self.memory, new_token)
        self.resources = ResourceProtector()
        self.resources.register_token_validator(BearerValidator(self.memory))
        self.app = Starlette(
            routes=[
                Route(AUTHORIZE_PATH, self._authorize, methods=["GET", "POST"]),
                Route(TOKEN_PATH, self._token, methods=["POST"]),
                Route(MESSAGES_PATH, self._messages, methods=["GET"]),
                Route("/.well-known/oauth-authorization-server", self._metadata, methods=["GET"]),
            ]
        )

    @property
    def authorize_url(self) -> str:
        return f"{self.issuer}{AUTHORIZE_PATH}"

    @property
    def token_url(self) -> str:
        return f"{self.issuer}{TOKEN_PATH}"

    @property
    def messages_url(self) -> str:
        return f"{self.issuer}{MESSAGES_PATH}"

    async def _read(self, request: Request) -> ProviderRequest | Response:
        form: list[tuple[str, str]] = []
        if request.method == "POST":
            body = await request.body()
            if len(body) > MAX_BODY_BYTES:
                return problem_page("The form sent more than this page accepts.", 413)
            try:
                form = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False, max_num_fields=16)
            except (UnicodeDecodeError, ValueError):
                return problem_page("The form could not be read.")
        return ProviderRequest(request, form)

    async def _authorize(self, request: Request) -> Response:
        incoming = await self._read(request)
        if isinstance(incoming, Response):
            return incoming
        try:
            grant = self.server.get_consent_grant(incoming)
        except OAuth2Error as error:
            if error.redirect_uri:  # the client and its redirect URI are known: tell the client
                return _response(self.server.handle_error_response(incoming, error))
            return problem_page(f"This sign-in request is not valid: {error.description or error.error}.")
        query = request.url.query
        # Under the issuer's own path: Demo Mail may be mounted beneath another app (`askback.demo.standalone`).
        action = f"{urlsplit(self.issuer).path}{AUTHORIZE_PATH}?{query}"
        redirect_origin = _origin(grant.redirect_uri or incoming.payload.redirect_uri)
        now = self.memory.clock.now()
        if request.method == "POST":
            issued = self.memory.tickets.pop(incoming.form.get("ticket", ""), None)
            if issued is None or issued[0] != query or issued[1] <= now:
                return problem_page(
                    "This sign-in page has expired or was already used. Return to your assistant and open the link "
                    "again."
                )
            user = incoming.form.get("user", "").strip()
            if incoming.form.get("decision") != "allow":
                return _response(self.server.create_authorization_response(incoming, grant_user=None, grant=grant))
            if not _USER.fullmatch(user):
                problem = "Type a user name of 1 to 64 letters, digits, '_', '.', '@' or '-'."
                return consent_page(
                    client_id=self.client_id,
                    action=action,
                    ticket=self._ticket(query, now),
                    redirect_origin=redirect_origin,
                    problem=problem,
                )
            return _response(self.server.create_authorization_response(incoming, grant_user=user, grant=grant))
        return consent_page(
            client_id=self.client_id, action=action, ticket=self._ticket(query, now), redirect_origin=redirect_origin
        )

    def _ticket(self, query: str, now: float) -> str:
        self.memory.tickets = {t: v for t, v in self.memory.tickets.items() if v[1] > now}
        ticket = self.new_token(32)
        self.memory.tickets[ticket] = (query, now + PAGE_SECONDS)
        return ticket

    async def _token(self, request: Request) -> Response:
        incoming = await self._read(request)
        if isinstance(incoming, Response):
            return incoming
        return _response(self.server.create_token_response(incoming))

    async def _messages(self, request: Request) -> Response:
        incoming = await self._read(request)
        if isinstance(incoming, Response):
            return incoming
        try:
            token = self.resources.validate_request([SCOPE], incoming)
        except OAuth2Error as error:
            return self.server.handle_response(*error())
        user = token.get_user()
        return JSONResponse({"user": user, "messages": mailbox(user)}, headers={"Cache-Control": "no-store"})

    async def _metadata(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": self.issuer,
                "authorization_endpoint": self.authorize_url,
                "token_endpoint": self.token_url,
                "scopes_supported": [SCOPE],
                "response_types_supported": ["code"],
                "grant_types_supported": ["authorization_code", "refresh_token"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            }
        )


@contextlib.contextmanager
def serving_provider(
    *, client_secret: str, redirect_uris: Sequence[str], client_id: str = CLIENT_ID, port: int = 0
) -> Iterator[DevProvider]:
    """Run a `DevProvider` on loopback, on `port` (0: a free one), in a thread of this process, until the block ends."""
    sock = loopback_socket(port, NAME)
    provider = DevProvider(
        issuer=f"http://127.0.0.1:{sock.getsockname()[1]}",
        client_secret=client_secret,
        redirect_uris=redirect_uris,
        client_id=client_id,
    )
    config = uvicorn.Config(provider.app, log_level="warning", log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="demo-mail", daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
