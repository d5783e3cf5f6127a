"""The hosted pages of connected accounts: where a person opens an authorization link from their assistant, is sent
to the provider (or asked for an API key), comes back, and is told what happened.

`pages_app(service, verifier)` is a small Starlette app, mounted at `service.prefix` with an `Open()` policy: it
checks who is signed in itself, with the deployment's `SignInVerifier`. Every decision is `AccountService`'s; a
route here reads the request, asks the verifier who opens the page, calls the service, and renders the outcome.

The pages are plain server-rendered HTML: no JavaScript, no external resource, every value escaped. Every response,
redirects and errors included, carries the same headers: `Cache-Control: no-store`, `Referrer-Policy: no-referrer`
(the start URL carries the link's token, and must not leak to the provider in a `Referer`), a strict
`Content-Security-Policy` and frame denial. No page ever shows a link token, an authorization code, a key or a PKCE
verifier; the only secret-looking values a page holds are the key form's hidden `state`, which is bound to the person
and the browser, and the form token.

Every POST (the key form, the development sign-in) is checked by `asgi.FormGuard` before anything changes: a form
the browser says comes from another site (`Origin`, `Sec-Fetch-Site`), or without this browser's form token
(`askback_accounts_csrf`, HttpOnly, SameSite=Strict, repeated in a hidden field), is refused with 403. The browser
that opens a link gets `askback_accounts_browser`, a random value (HttpOnly, SameSite=Lax so that it comes back
with the provider's redirect, Secure over https, scoped to the pages' path, as long-lived as the provider visit) that
the authorization is bound to: a callback or key form brought by another browser is refused, whoever is signed in.

`DevelopmentSignIn` is a verifier for development and the demo only: a user name in a signed cookie, set by a sign-in
page where anyone can type any name.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable, Mapping
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
from askback.asgi import CappedBody, FormGuard, FormRefusal
from askback.errors import InvalidParamsError

__all__ = ["BROWSER_COOKIE", "CSRF_COOKIE", "MAX_FORM_BYTES", "PAGE_HEADERS", "DevelopmentSignIn", "pages_app"]

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

CSRF_COOKIE = "askback_accounts_csrf"
"""The form token's cookie (the same value is in each form's hidden `csrf` field)."""
BROWSER_COOKIE = "askback_accounts_browser"
"""The random value an authorization is bound to, held by the browser that opened the link."""
_BROWSER_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")


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


def _csrf_field(token: str) -> str:
    return f'<input type="hidden" name="{FormGuard.FIELD}" value="{escape(token)}">\n'


def _render_key_form(ask: AskForKey, *, action: str, cancel_url: str, csrf: str) -> str:
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
        + _csrf_field(csrf)
        + f'<label for="key">{escape(label)}</label>\n'
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


def _render_sign_in(
    *, action: str, next_path: str | None, current: str | None, csrf: str, problem: str | None = None
) -> str:
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
        + _csrf_field(csrf)
        + '<label for="user">User name</label>\n'
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


_REFUSALS: Mapping[FormRefusal, str] = {
    "cross_site": (
        "This form was sent from another site, not from a page of this one, so it was refused. Nothing was changed "
        "and nobody was signed in. If you meant to send it, open the page here and send the form from there."
    ),
    "no_token": (
        "This form could not be checked: it was not sent from a page this browser was given here, or this browser "
        "does not keep cookies. Nothing was changed and nobody was signed in. Open the page again and send the form "
        "from there."
    ),
}


def _render_refused(refusal: FormRefusal) -> str:
    return _document("Refused: return to your assistant", "<h1>Refused</h1>\n" + _p(_REFUSALS[refusal]))


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
    - `POST /key` (form `state`, `key`, `csrf`): the API-key form's answer;
    - `GET /cancel`: the key form's way out, storing nothing;
    - `GET|POST /dev/sign-in?next=<path>` (form `user`, `next`, `csrf`): only when `verifier` is a
      `DevelopmentSignIn`.

    Each POST passes `FormGuard` first (403 otherwise); the authorization is bound to the browser that opened the
    link (`BROWSER_COOKIE`).
    """
    prefix = service.prefix
    development = verifier if isinstance(verifier, DevelopmentSignIn) else None
    guard = FormGuard(CSRF_COOKIE, path=prefix, origins=[service.base_url])
    over_https = service.base_url.startswith("https:")

    def failed(outcome: Failed, opener: str | None) -> HTMLResponse:
        sign_in = f"{prefix}{DevelopmentSignIn.PATH}" if development is not None and opener is None else None
        return _html(_render_failed(outcome.message, sign_in_url=sign_in), outcome.status_code)

    def with_form_token(request: Request, render: Callable[[str], str], status: int = 200) -> Response:
        token, new = guard.token(request)
        response = _html(render(token), status)
        if new:
            guard.remember(response, request, token, secure=over_https or request.url.scheme == "https")
        return response

    def browser_of(request: Request) -> str | None:
        value = request.cookies.get(BROWSER_COOKIE, "")
        return value if _BROWSER_VALUE.fullmatch(value) else None

    async def start(request: Request) -> Response:
        opener = await verifier(request)
        browser = browser_of(request) or secrets.token_urlsafe(32)
        outcome = await service.start(request.query_params.get("t", ""), opener=opener, browser=browser)
        if isinstance(outcome, Failed):
            return failed(outcome, opener)
        if isinstance(outcome, Redirect):
            response: Response = _redirect(outcome.url)
        else:
            ask = outcome
            response = with_form_token(
                request,
                lambda csrf: _render_key_form(ask, action=f"{prefix}/key", cancel_url=f"{prefix}/cancel", csrf=csrf),
            )
        # Lax, not Strict: the provider sends the person back with a top-level cross-site GET, which must carry it.
        response.set_cookie(
            BROWSER_COOKIE,
            browser,
            max_age=max(1, int(service.provider_visit_ttl)),
            path=prefix,
            httponly=True,
            samesite="lax",
            secure=over_https or request.url.scheme == "https",
        )
        return response

    async def callback(request: Request) -> Response:
        opener = await verifier(request)
        query = request.query_params
        outcome = await service.finish_oauth(
            state=query.get("state"),
            code=query.get("code"),
            error=query.get("error"),
            opener=opener,
            browser=browser_of(request),
        )
        if isinstance(outcome, Failed):
            return failed(outcome, opener)
        return _html(_render_done(outcome.account))

    async def key(request: Request) -> Response:
        opener = await verifier(request)
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        if (refusal := guard.check(request, form)) is not None:
            return _html(_render_refused(refusal), 403)
        state, entered = form.get("state"), form.get("key")
        try:
            outcome = await service.finish_key(
                state=state if isinstance(state, str) else None,
                key=entered if isinstance(entered, str) else "",
                opener=opener,
                browser=browser_of(request),
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
            return with_form_token(
                request, lambda csrf: _render_sign_in(action=action, next_path=next_path, current=current, csrf=csrf)
            )
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        if (refusal := guard.check(request, form)) is not None:
            return _html(_render_refused(refusal), 403)
        user = str(form.get("user") or "").strip()
        next_path = _safe_next(str(form.get("next") or ""))
        if not _USER.fullmatch(user):
            problem = "Type a user name of 1 to 64 letters, digits, '_', '.', '@' or '-'."
            return with_form_token(
                request,
                lambda csrf: _render_sign_in(
                    action=action, next_path=next_path, current=current, csrf=csrf, problem=problem
                ),
                400,
            )
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
