"""Demo Mail: a small OAuth 2.0 authorization server with a mailbox behind it, for `askback demo` and development.

`askback demo` starts one on loopback so that `summarize_inbox` shows the whole connected-account loop against a
provider that speaks real OAuth: the link, the sign-in and consent page, the callback, the retry. It never belongs
where users are real: it signs in whoever types a name, and keeps everything in memory until it stops.

Authlib does the OAuth 2.0 (RFC 6749): the authorization code grant, PKCE (RFC 7636, here S256 only and required),
refresh with rotation, client authentication, bearer token checks (RFC 6750). Authlib has no Starlette server
integration, so this module holds that glue and nothing of the protocol: a request is read (body included) before
Authlib sees it, because Authlib's server code is synchronous, and the `(status, body, headers)` Authlib returns
becomes a Starlette response. Around it: in-memory storage, one plain sign-in and consent page, and the mailbox.

- `GET /authorize`: the consent page for a valid request (an invalid one goes back to the client with the error, or,
  when the client or its redirect URI is unknown, gets a page saying so); `POST /authorize`: the person's answer.
- `POST /token`: authorization code (with its PKCE verifier) and refresh token grants.
- `GET /mail/messages`: the token's user's messages; 401 without a valid bearer token.
- `GET /.well-known/oauth-authorization-server`: the metadata (RFC 8414).
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import socket
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import uvicorn
from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.oauth2.rfc6749 import (  # type: ignore[import-untyped]
    AuthorizationCodeGrant,
    AuthorizationServer,
    InvalidRequestError,
    OAuth2Error,
    OAuth2Payload,
    OAuth2Request,
    RefreshTokenGrant,
    ResourceProtector,
)
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator  # type: ignore[import-untyped]
from authlib.oauth2.rfc7636 import CodeChallenge  # type: ignore[import-untyped]
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from askback.clock import Clock, SystemClock

__all__ = ["CLIENT_ID", "MESSAGES_PATH", "NAME", "SCOPE", "DevProvider", "serving_provider"]

NAME = "Demo Mail"
CLIENT_ID = "askback-demo"
SCOPE = "mail.read"
AUTHORIZE_PATH = "/authorize"
TOKEN_PATH = "/token"
MESSAGES_PATH = "/mail/messages"

ACCESS_TOKEN_SECONDS = 3600
CODE_SECONDS = 300
PAGE_SECONDS = 600
# A consent form or a token request is a few hundred bytes.
MAX_BODY_BYTES = 16 * 1024
_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


# --- storage (in memory; Authlib's model mixins are duck-typed) --------------------------------------------------


@dataclass(frozen=True)
class _Client:
    client_id: str
    client_secret: str = field(repr=False)
    redirect_uris: tuple[str, ...]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str | None) -> str:
        return " ".join(s for s in (scope or SCOPE).split() if s == SCOPE)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret.encode(), self.client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")  # a confidential client, never "none"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass(frozen=True)
class _Code:
    code: str = field(repr=False)
    client_id: str
    redirect_uri: str
    scope: str
    user: str
    code_challenge: str
    code_challenge_method: str
    expires_at: float

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class _Token:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    client_id: str
    scope: str
    user: str
    expires_at: float
    clock: Clock = field(repr=False)
    revoked: bool = False

    def check_client(self, client: _Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return max(int(self.expires_at - self.clock.now()), 0)

    def is_expired(self) -> bool:
        return self.clock.now() >= self.expires_at

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> str:
        return self.user


@dataclass
class _Memory:
    clock: Clock
    clients: dict[str, _Client] = field(default_factory=dict)
    codes: dict[str, _Code] = field(default_factory=dict)
    by_access: dict[str, _Token] = field(default_factory=dict)
    by_refresh: dict[str, _Token] = field(default_factory=dict)
    # The consent form's single-use tickets: ticket -> (the authorization request's query string, expiry).
    tickets: dict[str, tuple[str, float]] = field(default_factory=dict)


# --- Authlib: grants, server, resource protector -------------------------------------------------------------------


class _CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]  # noqa: RUF012 (Authlib's API)

    @property
    def memory(self) -> _Memory:
        memory: _Memory = self.server.memory
        return memory

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        self.memory.codes[code] = _Code(
            code=code,
            client_id=request.client.client_id,
            redirect_uri=request.payload.redirect_uri,
            scope=request.scope,
            user=request.user,
            code_challenge=data["code_challenge"],
            code_challenge_method=data["code_challenge_method"],
            expires_at=self.memory.clock.now() + CODE_SECONDS,
        )

    def query_authorization_code(self, code: str, client: _Client) -> _Code | None:
        found = self.memory.codes.get(code)
        if found is None or found.client_id != client.client_id or found.expires_at <= self.memory.clock.now():
            return None
        return found

    def delete_authorization_code(self, authorization_code: _Code) -> None:
        self.memory.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: _Code) -> str:
        return authorization_code.user


class _RefreshGrant(RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]  # noqa: RUF012 (Authlib's API)
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: each refresh token works once

    def authenticate_refresh_token(self, refresh_token: str) -> _Token | None:
        memory: _Memory = self.server.memory
        found = memory.by_refresh.get(refresh_token)
        return None if found is None or found.revoked else found

    def authenticate_user(self, refresh_token: _Token) -> str:
        return refresh_token.user

    def revoke_old_credential(self, refresh_token: _Token) -> None:
        refresh_token.revoked = True


class _PkceS256(CodeChallenge):  # type: ignore[misc]
    """Authlib's PKCE, with S256 the only method and a challenge required of every client, confidential ones too
    (Authlib itself asks a verifier only of public clients, and accepts `plain`)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]  # noqa: RUF012 (Authlib's API)
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("PKCE is required: send code_challenge with code_challenge_method=S256.")
        super().validate_code_challenge(grant, redirect_uri)


class _Payload(OAuth2Payload):  # type: ignore[misc]
    """The request's parameters: the query string's, then the form's (Flask's `request.values`)."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._datalist: defaultdict[str, list[str]] = defaultdict(list)
        for key, value in pairs:
            self._datalist[key].append(value)
        self._data = {key: values[0] for key, values in self._datalist.items()}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return self._datalist


class _Request(OAuth2Request):  # type: ignore[misc]
    """A Starlette request as Authlib reads it, its form already read (Authlib's server code is synchronous)."""

    def __init__(self, request: Request, form: Sequence[tuple[str, str]]) -> None:
        super().__init__(method=request.method, uri=str(request.url), headers=request.headers)
        query = list(request.query_params.multi_items())
        self._args = dict(reversed(query))  # the first value of each name, as the payload has it
        self._form = dict(reversed(form))
        self.payload = _Payload([*query, *form])

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class _Server(AuthorizationServer):  # type: ignore[misc]
    """Authlib's authorization server with what its Flask and Django integrations supply, written for Starlette:
    turning a request into an `OAuth2Request` and `(status, body, headers)` into a response."""

    def __init__(self, memory: _Memory, new_token: Callable[[int], str]) -> None:
        super().__init__(scopes_supported=[SCOPE])
        self.memory = memory
        self.register_token_generator(
            "default",
            BearerTokenGenerator(
                access_token_generator=lambda **_: new_token(42),
                refresh_token_generator=lambda **_: new_token(48),
                expires_generator=ACCESS_TOKEN_SECONDS,
            ),
        )
        self.register_grant(_CodeGrant, [_PkceS256(required=True)])
        self.register_grant(_RefreshGrant)

    def query_client(self, client_id: str) -> _Client | None:
        return self.memory.clients.get(client_id)

    def save_token(self, token: Mapping[str, Any], request: OAuth2Request) -> None:
        saved = _Token(
            access_token=token["access_token"],
            refresh_token=token.get("refresh_token"),
            client_id=request.client.client_id,
            scope=token.get("scope", ""),
            user=request.user,
            expires_at=self.memory.clock.now() + int(token["expires_in"]),
            clock=self.memory.clock,
        )
        self.memory.by_access[saved.access_token] = saved
        if saved.refresh_token is not None:
            self.memory.by_refresh[saved.refresh_token] = saved

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        assert isinstance(request, _Request), "the routes hand Authlib requests already read"
        return request

    def create_json_request(self, request: Any) -> Any:
        raise NotImplementedError("no endpoint here takes JSON")

    def handle_response(self, status: int, body: Any, headers: Sequence[tuple[str, str]]) -> Response:
        content = json.dumps(body) if isinstance(body, dict) else str(body or "")
        return Response(content, status_code=status, headers=dict(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Nothing listens to Authlib's signals here."""


class _BearerValidator(BearerTokenValidator):  # type: ignore[misc]
    def __init__(self, memory: _Memory) -> None:
        super().__init__(realm=NAME)
        self.memory = memory

    def authenticate_token(self, token_string: str) -> _Token | None:
        return self.memory.by_access.get(token_string)


# --- the pages (no I/O) ----------------------------------------------------------------------------------------------


def _page(title: str, body: str, *, form_to: str = "") -> HTMLResponse:
    # A form's redirect is checked against form-action too, so the consent page allows the client's origin as well.
    html = (
        f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>{escape(title)}</title>\n'
        f"</head>\n<body>\n<main>\n{body}\n</main>\n</body>\n</html>\n"
    )
    return HTMLResponse(
        html,
        headers={
            "Cache-Control": "no-store",
            "Referrer-Policy": "no-referrer",
            "Content-Security-Policy": (
                f"default-src 'none'; form-action 'self' {form_to}".rstrip()
                + "; frame-ancestors 'none'; base-uri 'none'"
            ),
            "X-Frame-Options": "DENY",
        },
    )


def _consent_page(*, client_id: str, action: str, ticket: str, redirect_origin: str, problem: str = "") -> Response:
    alert = f'<p role="alert">{escape(problem)}</p>\n' if problem else ""
    response = _page(
        f"Sign in to {NAME}",
        f"<h1>Sign in to {escape(NAME)}</h1>\n"
        f"<p>{escape(client_id)} asks to read your mail ({escape(SCOPE)}). This is a development provider: it signs "
        "you in as whatever name you type.</p>\n"
        f"{alert}"
        f'<form method="post" action="{escape(action)}">\n'
        f'<input type="hidden" name="ticket" value="{escape(ticket)}">\n'
        '<label for="user">User name</label>\n'
        '<input type="text" id="user" name="user" autocomplete="username" required maxlength="64">\n'
        '<button type="submit" name="decision" value="allow">Allow</button>\n'
        '<button type="submit" name="decision" value="deny">Deny</button>\n'
        "</form>",
        form_to=redirect_origin,
    )
    if problem:
        response.status_code = 400
    return response


def _problem_page(message: str, status: int = 400) -> Response:
    response = _page(f"{NAME}: not authorized", f"<h1>Not authorized</h1>\n<p>{escape(message)}</p>")
    response.status_code = status
    return response


def _response(answered: object) -> Response:
    """What Authlib answered, through `_Server.handle_response`: a Starlette response."""
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


# --- the app ---------------------------------------------------------------------------------------------------------


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
        self.memory = _Memory(clock or SystemClock())
        self.memory.clients[client_id] = _Client(client_id, client_secret, tuple(redirect_uris))
        self.new_token = new_token
        self.server = _Server(self.memory, new_token)
        self.resources = ResourceProtector()
        self.resources.register_token_validator(_BearerValidator(self.memory))
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

    async def _read(self, request: Request) -> _Request | Response:
        form: list[tuple[str, str]] = []
        if request.method == "POST":
            body = await request.body()
            if len(body) > MAX_BODY_BYTES:
                return _problem_page("The form sent more than this page accepts.", 413)
            try:
                form = parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False, max_num_fields=16)
            except (UnicodeDecodeError, ValueError):
                return _problem_page("The form could not be read.")
        return _Request(request, form)

    async def _authorize(self, request: Request) -> Response:
        incoming = await self._read(request)
        if isinstance(incoming, Response):
            return incoming
        try:
            grant = self.server.get_consent_grant(incoming)
        except OAuth2Error as error:
            if error.redirect_uri:  # the client and its redirect URI are known: tell the client
                return _response(self.server.handle_error_response(incoming, error))
            return _problem_page(f"This sign-in request is not valid: {error.description or error.error}.")
        query = request.url.query
        action = f"{AUTHORIZE_PATH}?{query}"
        redirect_origin = _origin(grant.redirect_uri or incoming.payload.redirect_uri)
        now = self.memory.clock.now()
        if request.method == "POST":
            issued = self.memory.tickets.pop(incoming.form.get("ticket", ""), None)
            if issued is None or issued[0] != query or issued[1] <= now:
                return _problem_page(
                    "This sign-in page has expired or was already used. Return to your assistant and open the link "
                    "again."
                )
            user = incoming.form.get("user", "").strip()
            if incoming.form.get("decision") != "allow":
                return _response(self.server.create_authorization_response(incoming, grant_user=None, grant=grant))
            if not _USER.fullmatch(user):
                problem = "Type a user name of 1 to 64 letters, digits, '_', '.', '@' or '-'."
                return _consent_page(
                    client_id=self.client_id,
                    action=action,
                    ticket=self._ticket(query, now),
                    redirect_origin=redirect_origin,
                    problem=problem,
                )
            return _response(self.server.create_authorization_response(incoming, grant_user=user, grant=grant))
        return _consent_page(
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
    *, client_secret: str, redirect_uris: Sequence[str], client_id: str = CLIENT_ID
) -> Iterator[DevProvider]:
    """Run a `DevProvider` on a free loopback port, in a thread of this process, until the block ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    # Listening before uvicorn starts: a request sent right away waits in the backlog rather than being refused.
    sock.listen(64)
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
