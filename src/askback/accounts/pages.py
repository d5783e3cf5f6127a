"""The hosted pages of connected accounts: where a person opens an authorization link from their assistant, is sent
to the provider (or asked for an API key), comes back, and is told what happened.

`pages_app(service, verifier)` is a small Starlette app, mounted at `service.prefix` with an `Open()` policy: it
checks who is signed in itself, with the deployment's `SignInVerifier`. Every decision is `AccountService`'s; a
route here reads the request, asks the verifier who opens the page, calls the service, and renders the outcome.

The pages are plain server-rendered HTML: no JavaScript, no external resource, every value escaped. Every response,
redirects and errors included, carries the same headers: `Cache-Control: no-store`, `Referrer-Policy: no-referrer`
(the start URL carries the link's token, and must not leak to the provider in a `Referer`), a strict
`Content-Security-Policy` and frame denial. No page ever shows a link token, an authorization code, a key or a PKCE
verifier; the only secret-looking value a page holds is the key form's hidden `state`, which is bound to the person.

`DevelopmentSignIn` is a verifier for development and the demo only: a user name in a signed cookie, set by a sign-in
page where anyone can type any name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Mapping
from html import escape
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from askback.accounts.repository import Account
from askback.accounts.service import AccountService, AskForKey, Failed, Redirect, SignInVerifier
from askback.asgi import CappedBody
from askback.errors import InvalidParamsError

__all__ = ["MAX_FORM_BYTES", "PAGE_HEADERS", "DevelopmentSignIn", "pages_app"]

# A key form or a sign-in form is a few hundred bytes; an API key a few kilobytes at most.
MAX_FORM_BYTES = 16 * 1024
_MAX_FIELD_BYTES = 8 * 1024
_MAX_FIELDS = 8

_STYLE = (
    "body{font-family:system-ui,sans-serif;line-height:1.5;margin:0;color:#1a1a1a;background:#fafafa}"
    "main{max-width:36rem;margin:3rem auto;padding:0 1rem}"
    "h1{font-size:1.5rem}"
    "label{display:block;font-weight:600;margin:1rem 0 .25rem}"
    "input{font:inherit;width:100%;box-sizing:border-box;padding:.5rem;border:1px solid #555;border-radius:4px}"
    "button{font:inherit;margin-top:1rem;padding:.5rem 1.25rem}"
    ".secondary{display:inline-block;margin-top:1rem}"
    ":focus-visible{outline:3px solid #1558d6;outline-offset:2px}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()

PAGE_HEADERS: Mapping[str, str] = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}
"""The headers of every response of the hosted pages."""

_RETURN = "You can close this page and return to your assistant."


# --- rendering (no I/O) ----------------------------------------------------------------------------------------------


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n<main>\n{body}\n</main>\n"
        "</body>\n</html>\n"
    )


def _p(text: str) -> str:
    return f"<p>{escape(text)}</p>"


def _render_done(account: Account) -> str:
    what = f"{account.connection} ({account.label})" if account.label else account.connection
    return _document(
        "Connected: return to your assistant",
        "<h1>Connected</h1>\n"
        + _p(f"Your {what} account is connected. Your assistant can use it now.")
        + "\n"
        + _p(_RETURN),
    )


def _render_failed(message: str, *, sign_in_url: str | None = None) -> str:
    body = "<h1>Not connected</h1>\n" + _p(message)
    if sign_in_url is not None:
        body += (
            f'\n<p><a href="{escape(sign_in_url)}">Sign in (development sign-in)</a>, then open the link from your '
            "assistant again.</p>"
        )
    return _document("Not connected: return to your assistant", body + "\n" + _p(_RETURN))


def _render_key_form(ask: AskForKey, *, action: str, cancel_url: str) -> str:
    label = ask.connection.label
    return _document(
        f"Enter your {label}",
        f"<h1>Connect {escape(ask.connection.name)}</h1>\n"
        + _p(
            f"Enter your {label} to connect it. It is stored encrypted and used only by this service, never shown to "
            "your assistant."
        )
        + f'\n<form method="post" action="{escape(action)}">\n'
        f'<input type="hidden" name="state" value="{escape(ask.state)}">\n'
        f'<label for="key">{escape(label)}</label>\n'
        '<input type="password" id="key" name="key" autocomplete="off" spellcheck="false" required>\n'
        '<button type="submit">Connect</button>\n'
        "</form>\n"
        f'<p><a class="secondary" href="{escape(cancel_url)}">Cancel: nothing is stored</a></p>',
    )


def _render_cancelled() -> str:
    return _document(
        "Cancelled: return to your assistant",
        "<h1>Cancelled</h1>\n"
        + _p("Nothing was stored and nothing was connected. Ask your assistant again when you want to connect.")
        + "\n"
        + _p(_RETURN),
    )


def _render_sign_in(*, action: str, next_path: str | None, current: str | None, problem: str | None = None) -> str:
    body = "<h1>Sign in (development)</h1>\n" + _p(
        "This sign-in is for development and demonstrations only: it trusts whatever name you type."
    )
    if current is not None:
        body += "\n" + _p(f"You are signed in as {current}.")
    if problem is not None:
        body += f'\n<p role="alert">{escape(problem)}</p>'
    hidden = "" if next_path is None else f'<input type="hidden" name="next" value="{escape(next_path)}">\n'
    body += (
        f'\n<form method="post" action="{escape(action)}">\n{hidden}'
        '<label for="user">User name</label>\n'
        '<input type="text" id="user" name="user" autocomplete="username" required maxlength="64">\n'
        '<button type="submit">Sign in</button>\n</form>'
    )
    return _document("Sign in (development)", body)


def _render_signed_in(user: str) -> str:
    return _document(
        "Signed in",
        "<h1>Signed in</h1>\n"
        + _p(f"You are signed in as {user}.")
        + "\n"
        + _p("Open the link from your assistant again to connect your account."),
    )


def _render_problem(status: int) -> str:
    titles = {
        404: ("Page not found", "There is no page at this address."),
        405: ("Not allowed", "This page cannot be used that way."),
        413: ("Too much was sent", "The form sent more than this page accepts. Nothing was stored."),
    }
    title, text = titles.get(status, ("Something went wrong", "The request could not be handled. Nothing was stored."))
    return _document(
        f"{title}: return to your assistant", f"<h1>{escape(title)}</h1>\n" + _p(text) + "\n" + _p(_RETURN)
    )


def _html(document: str, status: int = 200, headers: Mapping[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(document, status_code=status, headers={**PAGE_HEADERS, **(headers or {})})


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers=dict(PAGE_HEADERS))


# --- the development sign-in ----------------------------------------------------------------------------------------

_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


class DevelopmentSignIn:
    """A `SignInVerifier` for development and the demo only, never where users are real: anyone can sign in as any
    name on its page.

    The signed-in user is the cookie `askback_dev_user`, `<name>.<HMAC-SHA256 of the name under secret>`; a cookie
    without a valid signature (unsigned, tampered, signed with another secret) is nobody. `pages_app` serves its
    page at `<prefix>/dev/sign-in?next=<path>`, which sets the cookie and then redirects to `next` when it is a
    path on this site (never to another site)."""

    COOKIE = "askback_dev_user"
    PATH = "/dev/sign-in"

    def __init__(self, secret: str | bytes) -> None:
        key = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(key) < 16:
            raise ValueError("DevelopmentSignIn needs a secret of at least 16 bytes (secrets.token_bytes(32)).")
        self._key = key

    def __repr__(self) -> str:
        return "DevelopmentSignIn()"

    async def __call__(self, request: Request) -> str | None:
        return self.user_of(request.cookies.get(self.COOKIE))

    def cookie_value(self, user: str) -> str:
        """The cookie that signs `user` in."""
        if not _USER.fullmatch(user):
            raise ValueError("a development user name is 1 to 64 letters, digits, '_', '.', '@' or '-'")
        return f"{user}.{self._signature(user)}"

    def user_of(self, cookie: str | None) -> str | None:
        """The user a cookie signs in; `None` for no cookie or one whose signature does not verify."""
        if not cookie:
            return None
        user, dot, signature = cookie.rpartition(".")
        if not dot or not _USER.fullmatch(user):
            return None
        return user if hmac.compare_digest(signature, self._signature(user)) else None

    def _signature(self, user: str) -> str:
        mac = hmac.new(self._key, f"{self.COOKIE}\x00{user}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


def _safe_next(path: str | None) -> str | None:
    """`path` when it is a path on this site (`/accounts/...`), else `None`: never a URL to another site, whatever
    a browser would make of it (`//host`, `/\\host`, `https:...`, control characters)."""
    if not path or not path.startswith("/") or path.startswith(("//", "/\\")) or len(path) > 2048:
        return None
    if any(c == "\\" or ord(c) < 0x21 or ord(c) == 0x7F for c in path):
        return None
    parts = urlsplit(path)
    return path if not parts.scheme and not parts.netloc else None


# --- the app --------------------------------------------------------------------------------------------------------


def pages_app(service: AccountService, verifier: SignInVerifier) -> Starlette:
    """The hosted pages of `service`, to mount at `service.prefix` with an `Open()` policy:

    - `GET /start?t=<token>`: the link from the assistant; to the provider (303), or the API-key form;
    - `GET /callback?state=&code=&error=`: where the provider sends the person back;
    - `POST /key` (form `state`, `key`): the API-key form's answer;
    - `GET /cancel`: the key form's way out, storing nothing;
    - `GET|POST /dev/sign-in?next=<path>`: only when `verifier` is a `DevelopmentSignIn`.
    """
    prefix = service.prefix
    development = verifier if isinstance(verifier, DevelopmentSignIn) else None

    def failed(outcome: Failed, opener: str | None) -> HTMLResponse:
        sign_in = f"{prefix}{DevelopmentSignIn.PATH}" if development is not None and opener is None else None
        return _html(_render_failed(outcome.message, sign_in_url=sign_in), outcome.status_code)

    async def start(request: Request) -> Response:
        opener = await verifier(request)
        outcome = await service.start(request.query_params.get("t", ""), opener=opener)
        if isinstance(outcome, Redirect):
            return _redirect(outcome.url)
        if isinstance(outcome, AskForKey):
            return _html(_render_key_form(outcome, action=f"{prefix}/key", cancel_url=f"{prefix}/cancel"))
        return failed(outcome, opener)

    async def callback(request: Request) -> Response:
        opener = await verifier(request)
        query = request.query_params
        outcome = await service.finish_oauth(
            state=query.get("state"), code=query.get("code"), error=query.get("error"), opener=opener
        )
        if isinstance(outcome, Failed):
            return failed(outcome, opener)
        return _html(_render_done(outcome.account))

    async def key(request: Request) -> Response:
        opener = await verifier(request)
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        state, entered = form.get("state"), form.get("key")
        try:
            outcome = await service.finish_key(
                state=state if isinstance(state, str) else None,
                key=entered if isinstance(entered, str) else "",
                opener=opener,
            )
        except InvalidParamsError as exc:  # a key the provider's header cannot carry; its message names no key
            return failed(Failed(f"{exc} Nothing was connected. Ask your assistant again for a new link."), opener)
        if isinstance(outcome, Failed):
            return failed(outcome, opener)
        return _html(_render_done(outcome.account))

    async def cancel(request: Request) -> Response:
        return _html(_render_cancelled())

    async def sign_in(request: Request) -> Response:
        assert development is not None
        action = f"{prefix}{DevelopmentSignIn.PATH}"
        current = await development(request)
        if request.method == "GET":
            next_path = _safe_next(request.query_params.get("next"))
            return _html(_render_sign_in(action=action, next_path=next_path, current=current))
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        user = str(form.get("user") or "").strip()
        next_path = _safe_next(str(form.get("next") or ""))
        if not _USER.fullmatch(user):
            problem = "Type a user name of 1 to 64 letters, digits, '_', '.', '@' or '-'."
            return _html(_render_sign_in(action=action, next_path=next_path, current=current, problem=problem), 400)
        response: Response = _redirect(next_path) if next_path is not None else _html(_render_signed_in(user))
        response.set_cookie(
            DevelopmentSignIn.COOKIE,
            development.cookie_value(user),
            path="/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    async def problem(request: Request, exc: Exception) -> Response:
        # A 500 is re-raised by Starlette once this page is sent, so the server logs it with its traceback.
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
        return _html(_render_problem(status), status, headers={k: v for k, v in headers.items() if k == "Allow"})

    routes = [
        Route("/start", start, methods=["GET"]),
        Route("/callback", callback, methods=["GET"]),
        Route("/key", key, methods=["POST"]),
        Route("/cancel", cancel, methods=["GET"]),
    ]
    if development is not None:
        routes.append(Route(DevelopmentSignIn.PATH, sign_in, methods=["GET", "POST"]))
    return Starlette(
        routes=routes,
        middleware=[Middleware(CappedBody, limit=MAX_FORM_BYTES)],
        exception_handlers={HTTPException: problem, Exception: problem},
    )
