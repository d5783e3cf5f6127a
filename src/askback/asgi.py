"""Small ASGI pieces the products' own pages share (the hosted account pages, the runtime's web inbox).

`CappedBody` refuses (413) a request body larger than its limit: a declared `Content-Length` over it before
anything is read, and a streamed body as soon as it passes it. The refusal is raised from `receive`, inside the
route, as a Starlette `HTTPException`, so the app's own error page answers it.

`FormGuard` is what a page that takes a form POST checks before anything changes: that the browser says the form
comes from this site (`Origin`, `Sec-Fetch-Site`), and that it carries this browser's token (a random value in an
HttpOnly, SameSite=Strict cookie, repeated in a hidden field of the form: the double-submit pattern). A page on
another site can make a browser post a form here, but cannot read the cookie to copy its value into the form.

`SecurityHeaders` puts a fixed set of headers (the page kit's, `askback.pages`) on every response that passes through
it.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from typing import Literal
from urllib.parse import urlsplit

from starlette.datastructures import FormData, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyTooLarge", "CappedBody", "FormGuard", "FormRefusal", "SecurityHeaders"]


class BodyTooLarge(HTTPException):
    def __init__(self) -> None:
        super().__init__(status_code=413)


class CappedBody:
    """Refuses (413) a request body larger than `limit` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        too_large = declared.isdigit() and int(declared) > self.limit
        seen = 0

        async def capped() -> Message:
            nonlocal seen
            if too_large:
                raise BodyTooLarge()
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge()
            return message

        await self.app(scope, capped, send)


class SecurityHeaders:
    """Puts `headers` on every response that passes through it, whichever route or handler made it."""

    def __init__(self, app: ASGIApp, *, headers: Mapping[str, str]) -> None:
        self.app = app
        self.headers = dict(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


FormRefusal = Literal["cross_site", "no_token"]
"""Why `FormGuard.check` refused a POST: the browser said it came from another site, or it lacks this browser's
token (posted from a page this browser was not given here, or with cookies blocked)."""

_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
_DEFAULT_PORTS = {"http": 80, "https": 443}


class FormGuard:
    """The checks of a state-changing form POST: from this site, with this browser's token.

    `token(request)` is the token to put in the form's hidden field `FIELD` (the browser's own, or a new one: then
    `remember(response, request, token)` sets the cookie); `check(request, form)` is `None` for a POST that passes,
    else why not. `origins` are further origins the site is reached at (a public URL behind a proxy, which the
    request itself may not show). The cookie is Secure over https, and always with `secure` (a site served over
    https behind a proxy that speaks plain http to it)."""

    FIELD = "csrf"

    def __init__(self, cookie: str, *, path: str = "/", origins: Iterable[str] = (), secure: bool = False) -> None:
        self.cookie = cookie
        self.path = path
        self.secure = secure
        self._origins = frozenset(o for o in map(_normal_origin, origins) if o is not None)

    def token(self, request: Request) -> tuple[str, bool]:
        """This browser's token, or a new one (True: `remember` it)."""
        token = request.cookies.get(self.cookie, "")
        if _TOKEN.fullmatch(token):
            return token, False
        return secrets.token_urlsafe(32), True

    def remember(self, response: Response, request: Request, token: str) -> None:
        """Set the token's cookie on `response`."""
        response.set_cookie(
            self.cookie,
            token,
            path=self.path,
            httponly=True,
            samesite="strict",
            secure=self.secure or request.url.scheme == "https",
        )

    def check(self, request: Request, form: FormData) -> FormRefusal | None:
        if self.cross_site(request):
            return "cross_site"
        cookie = request.cookies.get(self.cookie, "")
        sent = form.get(self.FIELD)
        if not isinstance(sent, str) or not _TOKEN.fullmatch(cookie) or not _TOKEN.fullmatch(sent):
            return "no_token"
        return None if hmac.compare_digest(cookie.encode(), sent.encode()) else "no_token"

    def cross_site(self, request: Request) -> bool:
        """True for a request the browser says comes from another origin (`Origin`, or `Sec-Fetch-Site`)."""
        sent = request.headers.get("origin")
        # Under `Referrer-Policy: no-referrer` a browser sends `Origin: null` with its own same-origin form posts, so
        # "null" is judged by `Sec-Fetch-Site` alone (an opaque origin from elsewhere says cross-site there).
        if sent is not None and sent != "null":
            here = _normal_origin(f"{request.url.scheme}://{request.url.netloc}")
            theirs = _normal_origin(sent)
            if theirs is None or (theirs != here and theirs not in self._origins):
                return True
        site = request.headers.get("sec-fetch-site")
        return site is not None and site not in ("same-origin", "none")


def _normal_origin(value: str) -> str | None:
    """`scheme://host[:port]` in lowercase without the scheme's default port; `None` for what is not an origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if not scheme or not host:
        return None
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{scheme}://{shown}:{port}"
