"""Small ASGI pieces the products' own pages share (the hosted account pages, the runtime's web inbox).

`CappedBody` refuses (413) a request body larger than its limit: a declared `Content-Length` over it before
anything is read, and a streamed body as soon as it passes it. The refusal is raised from `receive`, inside the
route, as a Starlette `HTTPException`, so the app's own error page answers it.

`FormGuard` is what a page that takes a form POST checks before anything changes: that the browser says the form
comes from this site (`Origin`, `Sec-Fetch-Site`), and that it carries this browser's token (a random value in an
HttpOnly, SameSite=Strict cookie, repeated in a hidden field of the form: the double-submit pattern). A page on
another site can make a browser post a form here, but cannot read the cookie to copy its value into the form.

`SecurityHeaders` puts a fixed set of headers (the page kit's, `askback.web.pages`) on every response that passes through
it.

`HostGuard` answers only the hosts a server is configured for (`AllowedHosts`: the loopback names, the hosts of its
public URLs, `ASKBACK_ALLOWED_HOSTS`), before any route runs: DNS rebinding otherwise lets a page on any site reach a
server on loopback from the person's own browser. `served_origin` is the origin of the address a request reached
(the listening socket's, never its `Host`).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol
from urllib.parse import urlsplit

from starlette.datastructures import FormData, Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "API_HEADERS",
    "LOOPBACK_HOSTS",
    "AllowedHosts",
    "BodyTooLarge",
    "CappedBody",
    "FormGuard",
    "FormRefusal",
    "HostGuard",
    "HostVerdict",
    "OriginGuard",
    "SecurityHeaders",
    "parse_host",
    "served_origin",
]

logger = logging.getLogger("askback")


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
    """Puts `headers` on every response that passes through it, whichever route or handler made it; with
    `missing_only`, only those a response does not set itself (an app whose mounted pages carry their own policy)."""

    def __init__(self, app: ASGIApp, *, headers: Mapping[str, str], missing_only: bool = False) -> None:
        self.app = app
        self.headers = dict(headers)
        self.missing_only = missing_only
        # Encoded once, as the response's raw header list holds them.
        self._raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in self.headers.items()]
        self._names = frozenset(name for name, _ in self._raw)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                given = list(message.get("headers", ()))
                if self.missing_only:
                    present = {name.lower() for name, _ in given}
                    message["headers"] = given + [h for h in self._raw if h[0] not in present]
                else:
                    message["headers"] = [h for h in given if h[0].lower() not in self._names] + self._raw
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
    request itself may not show), and `hosts` the hosts whose origins on the scheme the request was served over are
    this site's (default: the loopback names); the request's own `Host` is never one of them by itself, since a page
    on a rebinding name would send a matching `Origin`. The cookie is Secure over https, and always with `secure` (a
    site served over https behind a proxy that speaks plain http to it)."""

    FIELD = "csrf"

    def __init__(
        self,
        cookie: str,
        *,
        path: str = "/",
        origins: Iterable[str] = (),
        hosts: AllowedHosts | None = None,
        secure: bool = False,
    ) -> None:
        self.cookie = cookie
        self.path = path
        self.secure = secure
        self.hosts = hosts if hosts is not None else AllowedHosts.of()
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
            theirs = _normal_origin(sent)
            if theirs is None or not (theirs in self._origins or self._configured_host(theirs, request)):
                return True
        site = request.headers.get("sec-fetch-site")
        return site is not None and site not in ("same-origin", "none")

    def _configured_host(self, origin: str, request: Request) -> bool:
        """An origin on one of `hosts`, over the scheme and port this request was served on (the socket's, never
        `Host`'s): a page of another port on the same name is another site."""
        parts = urlsplit(origin)
        parsed = parse_host(parts.netloc)
        served = request.scope.get("server")
        if parsed is None or not self.hosts.admits(parsed[0]) or not served:
            return False
        port = parsed[1] if parsed[1] is not None else _DEFAULT_PORTS.get(parts.scheme)
        return bool(parts.scheme == request.scope.get("scheme", "http") and port == served[1])


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


# --- hosts ----------------------------------------------------------------------------------------------------------

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""The names of this machine a server always answers, on any port."""

HostVerdict = Literal["served", "misdirected", "malformed"]
"""What `AllowedHosts.judge` makes of a request's `Host`: one of the hosts (served), another host (421), or no one
well-formed `Host` header (400)."""

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_host(value: str) -> tuple[str, int | None] | None:
    """`host[:port]` as a `Host` header carries it (RFC 9110 section 7.2): the host in lowercase without a trailing
    dot (an IPv6 address in brackets, compressed) and the port; `None` for anything else (empty, userinfo, a path,
    white space or bytes outside ASCII, a zone id, an empty label, a port out of range)."""
    if not value or len(value) > 300 or not value.isascii():
        return None
    value = value.lower()
    if value.startswith("["):
        inside, bracket, rest = value[1:].partition("]")
        if not bracket or "%" in inside:
            return None
        try:
            host = f"[{ipaddress.IPv6Address(inside).compressed}]"
        except ValueError:
            return None
    else:
        name, colon, port_text = value.partition(":")
        rest = colon + port_text
        name = name[:-1] if name.endswith(".") else name
        labels = name.split(".")
        if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
            return None
        host = name
    if not rest:
        return host, None
    if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]) or int(rest[1:]) > 65535:
        return None
    return host, int(rest[1:])


def _url_host(url: str) -> str | None:
    """The host of an absolute URL, as `parse_host` gives it; `None` when it has none."""
    try:
        netloc = urlsplit(url.strip()).netloc
    except ValueError:
        return None
    parsed = parse_host(netloc.rpartition("@")[2])
    return parsed[0] if parsed is not None else None


class HostSettings(Protocol):
    """The settings that name the hosts a server answers (askback's `Settings`)."""

    @property
    def allowed_hosts(self) -> Sequence[str]: ...

    @property
    def public_url(self) -> str | None: ...


@dataclass(frozen=True)
class AllowedHosts:
    """The hosts a server answers, on any port: `names` (exact) and `suffixes` (`.example.com` for the entry
    `*.example.com`: its subdomains, not itself)."""

    names: frozenset[str] = frozenset(LOOPBACK_HOSTS)
    suffixes: frozenset[str] = frozenset()

    @classmethod
    def of(cls, hosts: Iterable[str] = (), *, urls: Iterable[str | None] = ()) -> AllowedHosts:
        """The loopback names, each of `hosts` (`name`, `name:port`, `[v6]`, `*.domain` or a URL; the port is not
        kept) and the host of each of `urls` (the public URLs; `None` skipped). `ValueError` for an entry of `hosts`
        that is none of those."""
        names, suffixes = set(LOOPBACK_HOSTS), set()
        for i, entry in enumerate(hosts, start=1):
            entry = entry.strip()
            wildcard = entry.startswith("*.")
            host = _url_host(entry) if "://" in entry else _host_entry(entry[2:] if wildcard else entry)
            if host is None or (wildcard and host.startswith("[")):
                raise ValueError(
                    f"allowed host {i} is not a host name (tools.example.com), an address (10.0.0.5, [fd00::5]), "
                    "a domain's subdomains (*.example.com) or a URL"
                )
            if wildcard:
                suffixes.add("." + host)
            else:
                names.add(host)
        names.update(host for host in (_url_host(url) for url in urls if url) if host is not None)
        return cls(frozenset(names), frozenset(suffixes))

    @classmethod
    def configured(
        cls, settings: HostSettings, hosts: Iterable[str] = (), *, urls: Iterable[str | None] = ()
    ) -> AllowedHosts:
        """The hosts `settings` configure (`ASKBACK_ALLOWED_HOSTS`, `ASKBACK_PUBLIC_URL`'s host), with `hosts` and the
        hosts of `urls` besides."""
        return cls.of([*settings.allowed_hosts, *hosts], urls=[settings.public_url, *urls])

    def admits(self, host: str) -> bool:
        """Whether `host` (as `parse_host` gives it) is one of these."""
        return host in self.names or any(host.endswith(suffix) for suffix in self.suffixes)

    def judge(self, values: Sequence[str]) -> HostVerdict:
        """The verdict on a request whose `Host` headers are `values` (each as sent)."""
        if len(values) != 1:
            return "malformed"
        parsed = parse_host(values[0])
        if parsed is None:
            return "malformed"
        return "served" if self.admits(parsed[0]) else "misdirected"

    def admits_origin(self, origin: str) -> bool:
        """Whether an `Origin` header names an http(s) origin on one of these hosts."""
        normal = _normal_origin(origin)
        if normal is None:
            return False
        scheme, _, authority = normal.partition("://")
        parsed = parse_host(authority)
        return scheme in ("http", "https") and parsed is not None and self.admits(parsed[0])

    def describe(self) -> str:
        """The hosts, for a log line."""
        return ", ".join([*sorted(self.names), *sorted("*" + suffix for suffix in self.suffixes)])


def _host_entry(entry: str) -> str | None:
    parsed = parse_host(entry)
    return parsed[0] if parsed is not None else None


def served_origin(scope: Scope) -> str | None:
    """The origin of the address the request reached (the listening socket's, never its `Host`): `http://127.0.0.1:
    8000` for a server on loopback; `None` when the server does not say (a Unix socket)."""
    server = scope.get("server")
    if not server or server[1] is None:
        return None
    host, port = str(server[0]), int(server[1])
    scheme = str(scope.get("scheme", "http")).replace("ws", "http")
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == _DEFAULT_PORTS.get(scheme) else f"{scheme}://{shown}:{port}"


API_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}
"""The security headers of a response that is no page (JSON, an empty answer, a refusal): it names no stylesheet,
so its policy allows none."""
_REFUSALS = {
    "misdirected": (421, "misdirected_request", "This server does not answer this host name."),
    "malformed": (400, "invalid_host", "The request needs exactly one Host header, of the form host[:port]."),
}
# Hosts refused so far that were logged: each once, and no more than this many, whatever a scanner sends.
_LOGGED = 64


class HostGuard:
    """Answers only requests whose `Host` is one of `allowed` (421 Misdirected Request otherwise; 400 for a `Host`
    missing, repeated or not `host[:port]`), before any route runs, with the security headers on the refusal.

    The hazard is DNS rebinding: a page on rebind.example, whose owner then points that name at 127.0.0.1, reaches a
    server on this machine from the person's own browser as its own origin, and may read every page and post every
    form; only the `Host` it sends still names its site. `exempt` paths (health probes, which Kubernetes and load
    balancers send to the address itself) are served whatever the host. Each refused host is logged once (up to
    `_LOGGED` of them), naming `setting`, which adds a host this server should answer."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed: AllowedHosts,
        exempt: Iterable[str] = (),
        setting: str = "ASKBACK_ALLOWED_HOSTS (or --allowed-host)",
    ) -> None:
        self.app = app
        self.allowed = allowed
        self.exempt = frozenset(exempt)
        self.setting = setting
        self._logged: set[str] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.exempt:
            await self.app(scope, receive, send)
            return
        values = [value.decode("latin-1") for name, value in scope["headers"] if name.lower() == b"host"]
        verdict = self.allowed.judge(values)
        if verdict == "served":
            await self.app(scope, receive, send)
            return
        if verdict == "misdirected":
            self._log(values[0])
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await _refusal(verdict, Headers(scope=scope).get("accept", ""))(scope, receive, send)

    def _log(self, value: str) -> None:
        parsed = parse_host(value)
        host = parsed[0] if parsed is not None else "?"
        if host in self._logged or len(self._logged) >= _LOGGED:
            return
        self._logged.add(host)
        logger.warning(
            "askback: refused a request for the host %s (421 Misdirected Request): this server answers %s. If %s "
            "is this server's own name (behind a load balancer or proxy), add it to %s.",
            host,
            self.allowed.describe(),
            host,
            self.setting,
            extra={"host": host, "setting": self.setting},
        )


class OriginGuard:
    """A request to `path` (an API such as `/mcp`) whose `Origin` is not on one of `allowed` is refused (403), as the
    MCP transport asks: a page of another site must not drive the endpoint from a person's browser. A request
    without `Origin` (every client that is not a browser) goes on."""

    def __init__(self, app: ASGIApp, *, path: str, allowed: AllowedHosts) -> None:
        self.app = app
        self.path = path
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") != self.path:
            await self.app(scope, receive, send)
            return
        origin = Headers(scope=scope).get("origin")
        if origin is not None and not self.allowed.admits_origin(origin):
            text = "this endpoint is not served to pages of another site"
            content = json.dumps({"error": "invalid_origin", "error_description": text})
            refused = Response(content, 403, headers=API_HEADERS, media_type="application/json")
            await refused(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _refusal(verdict: HostVerdict, accept: str) -> Response:
    status, error, text = _REFUSALS[verdict]
    if "text/html" in accept:
        body = f'<!doctype html><html lang="en"><title>{status}</title><p>{text}</p></html>\n'
        return Response(body, status_code=status, headers=API_HEADERS, media_type="text/html")
    content = json.dumps({"error": error, "error_description": text})
    return Response(content, status_code=status, headers=API_HEADERS, media_type="application/json")
