"""The hosted pages of connected accounts: where a person opens an authorization link from their assistant, is sent
to the provider (or asked for an API key), comes back, and is told what happened.

`pages_app(service, verifier)` is a small Starlette app, mounted at `service.prefix` with an `Open()` policy: it
checks who is signed in itself, with the deployment's `SignInVerifier`. Every decision is `AccountService`'s; a
route here reads the request, asks the verifier who opens the page, calls the service, and renders the outcome.

The pages are the page kit's (`askback.web.pages`), from the templates beside this module (`templates/`): plain
server-rendered HTML, no JavaScript, no external resource, every value escaped by the template. Every response,
redirects and errors included, carries the same headers: `Cache-Control: no-store`, `Referrer-Policy: no-referrer`
(the start URL carries the link's token, and must not leak to the provider in a `Referer`), a strict
`Content-Security-Policy` and frame denial. No page ever shows a link token, an authorization code, a key or a PKCE
verifier; the only secret-looking values a page holds are the key form's hidden `state`, which is bound to the person
and the browser, and the form token.

Every POST (the key form, the development sign-in) is checked by `asgi.FormGuard` before anything changes: a form
the browser says comes from another site (`Origin`, `Sec-Fetch-Site`), or without this browser's form token
(`askback_accounts_csrf`, HttpOnly, SameSite=Strict, repeated in a hidden field), is refused with 403. The browser
that opens a link gets `askback_accounts_browser`, a random value (HttpOnly, SameSite=Lax so that it comes back
with the provider's redirect, Secure over https, scoped to the pages' path, kept a day longer than the provider
visit) that the authorization is bound to: a callback or key form brought by another browser is refused, whoever is
signed in, and one brought back by this browser after the visit time says the sign-in expired.

A person nobody has signed in yet, opening a link, is sent (303) to the verifier's sign-in page when it has one (an
`askback.web.pages.SignIn`, such as `askback.identity.PeopleSignIn`), to come back to the link once signed in; a verifier
without one gets the "sign in first" page, as does the development sign-in, whose page that one links to. No page
writes the link (its token) down, so the development sign-in keeps the way back in a cookie of its own
(`DevelopmentSignIn.RETURN_COOKIE`: signed, HttpOnly, SameSite=Strict, sent to its page only, for ten minutes), and
sends the person back to the link once signed in; only to a path on this site, as `safe_next_path` judges it.

`DevelopmentSignIn` is a verifier for development and the demo only: a user name in a signed cookie, set by a sign-in
page where anyone can type any name. It is refused on a site outside loopback (`check_site`, run by `AccountsSetup`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from askback.accounts.repository import Account
from askback.accounts.service import AccountService, Failed, Redirect, SignInVerifier
from askback.core.addresses import is_loopback
from askback.errors import ConfigurationError, InvalidParamsError
from askback.web.asgi import FormGuard, FormRefusal
from askback.web.pages import PageKit, SignedInPerson, SignIn, safe_next_path

__all__ = ["BROWSER_COOKIE", "CSRF_COOKIE", "MAX_FORM_BYTES", "PAGE_HEADERS", "DevelopmentSignIn", "pages_app"]

# A key form or a sign-in form is a few hundred bytes; an API key a few kilobytes at most.
MAX_FORM_BYTES = 16 * 1024
_MAX_FIELD_BYTES = 8 * 1024
_MAX_FIELDS = 8

_KIT = PageKit(Path(__file__).parent / "templates")

PAGE_HEADERS: Mapping[str, str] = _KIT.headers
"""The headers of every response of the hosted pages."""

CSRF_COOKIE = "askback_accounts_csrf"
"""The form token's cookie (the same value is in each form's hidden `csrf` field)."""
BROWSER_COOKIE = "askback_accounts_browser"
"""The random value an authorization is bound to, held by the browser that opened the link."""
_BROWSER_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")
# The browser keeps its value a day longer than the provider visit lasts: a person who comes back late is then told
# that the visit expired, not that this browser never started it (the cookie would have gone with the visit).
_BROWSER_KEPT_AFTER_VISIT = 24 * 3600

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

_PROBLEMS: Mapping[int, tuple[str, str]] = {
    404: ("Page not found", "There is no page at this address."),
    405: ("Not allowed", "This page cannot be used that way."),
    413: ("Too much was sent", "The form sent more than this page accepts. Nothing was stored."),
}
_PROBLEM = ("Something went wrong", "The request could not be handled. Nothing was stored.")


def _done(request: Request, account: Account) -> Response:
    what = f"{account.connection} ({account.label})" if account.label else account.connection
    return _KIT.page(request, "done.html", {"what": what})


def _problem(request: Request, status: int) -> Response:
    title, text = _PROBLEMS.get(status, _PROBLEM)
    return _KIT.page(request, "problem.html", {"title": title, "text": text}, status=status)


# --- the development sign-in ----------------------------------------------------------------------------------------

_USER = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
# How long the development sign-in keeps the link a person opened before signing in, to send them back to it; and
# the sign-in page's route that does (`/dev/sign-in/back`: under the sign-in page's path, so the cookie reaches it).
_RETURN_TTL = 600
_BACK = "/back"


class DevelopmentSignIn:
    """A `SignInVerifier` for development and the demo only, never where users are real: anyone can sign in as any
    name on its page.

    The signed-in user is the cookie `askback_dev_user`, `<name>.<HMAC-SHA256 of the name under secret>`; a cookie
    without a valid signature (unsigned, tampered, signed with another secret) is nobody. `pages_app` serves its
    page at `<prefix>/dev/sign-in?next=<path>`, which sets the cookie and then redirects to `next` when it is a
    path on this site (never to another site); without a `next`, to the link the person opened before signing in,
    kept in `RETURN_COOKIE` (`return_value`, `return_path`: a path on this site, signed under `secret`).

    It is a `PersonSignIn` too: `groups` gives each user name its groups (for the approvals' pages in development
    and the demo), and the method is `development`."""

    COOKIE = "askback_dev_user"
    PATH = "/dev/sign-in"
    RETURN_COOKIE = "askback_dev_return"

    def __init__(self, secret: str | bytes, *, groups: Mapping[str, Iterable[str]] | None = None) -> None:
        key = secret.encode() if isinstance(secret, str) else bytes(secret)
        if len(key) < 16:
            raise ValueError("DevelopmentSignIn needs a secret of at least 16 bytes (secrets.token_bytes(32)).")
        self._key = key
        if any(isinstance(names, str) for names in (groups or {}).values()):
            raise ValueError("DevelopmentSignIn's groups give each user a collection of group names, not one string.")
        self._groups = {user: frozenset(names) for user, names in (groups or {}).items()}

    def __repr__(self) -> str:
        return "DevelopmentSignIn()"

    async def __call__(self, request: Request) -> str | None:
        return self.user_of(request.cookies.get(self.COOKIE))

    async def person(self, request: Request) -> SignedInPerson | None:
        """The user signed in on `request`, with the groups given for them."""
        user = self.user_of(request.cookies.get(self.COOKIE))
        return None if user is None else SignedInPerson(user, self._groups.get(user, frozenset()), "development")

    def sign_in_url(self, request: Request, next_path: str) -> str | None:
        """Its page on the account pages `request` was sent to, coming back to `next_path` (a path on this site)."""
        page = f"{str(request.scope.get('root_path', '')).rstrip('/')}{self.PATH}"
        safe = safe_next_path(next_path)
        return page if safe is None else f"{page}?{urlencode({'next': safe})}"

    @staticmethod
    def check_site(base_url: str) -> None:
        """Refuse (`ConfigurationError`) a site people reach outside loopback: where anyone can be anyone, the
        people must be the developer's own machine."""
        if not is_loopback(urlsplit(base_url).hostname):
            raise ConfigurationError(
                "The development sign-in lets anyone sign in as anyone, so it serves only a site on loopback "
                "(http://127.0.0.1, http://localhost), and this one is reached elsewhere (its base_url). Give the "
                "account pages a real sign-in instead: askback.identity.PeopleSignIn (ASKBACK_SIGNIN_CLIENT_ID, ...)."
            )

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

    def return_value(self, path: str) -> str | None:
        """The `RETURN_COOKIE` that sends a person back to `path` once signed in; `None` for a path that is not one
        on this site (`safe_next_path`)."""
        safe = safe_next_path(path)
        if safe is None:
            return None
        encoded = base64.urlsafe_b64encode(safe.encode()).decode().rstrip("=")
        return f"{encoded}.{self._signature(safe, self.RETURN_COOKIE)}"

    def return_path(self, cookie: str | None) -> str | None:
        """The path a `RETURN_COOKIE` sends back to; `None` for none, one not signed under this secret, or one that is
        not a path on this site."""
        encoded, dot, signature = (cookie or "").rpartition(".")
        if not dot or len(encoded) > 4 * 1024:
            return None
        try:
            path = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
        except ValueError:  # not base64, or not UTF-8
            return None
        if not hmac.compare_digest(signature, self._signature(path, self.RETURN_COOKIE)):
            return None
        return safe_next_path(path)

    def _signature(self, value: str, purpose: str = COOKIE) -> str:
        mac = hmac.new(self._key, f"{purpose}\x00{value}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).decode().rstrip("=")


# --- the app --------------------------------------------------------------------------------------------------------


def pages_app(service: AccountService, verifier: SignInVerifier) -> Starlette:
    """The hosted pages of `service`, to mount at `service.prefix` with an `Open()` policy:

    - `GET /start?t=<token>`: the link from the assistant; to the provider (303), or the API-key form;
    - `GET /callback?state=&code=&error=`: where the provider sends the person back;
    - `POST /key` (form `state`, `key`, `csrf`): the API-key form's answer;
    - `GET /cancel`: the key form's way out, storing nothing;
    - `GET|POST /dev/sign-in?next=<path>` (form `user`, `next`, `csrf`) and `GET /dev/sign-in/back` (to the link
      opened before signing in): only when `verifier` is a `DevelopmentSignIn`.

    Each POST passes `FormGuard` first (403 otherwise); the authorization is bound to the browser that opened the
    link (`BROWSER_COOKIE`). A link opened by nobody signed in is sent to `verifier.sign_in_url` when the verifier
    is a `SignIn` other than the development one (whose page the "sign in first" page links to).
    """
    prefix = service.prefix
    development = verifier if isinstance(verifier, DevelopmentSignIn) else None
    over_https = service.base_url.startswith("https:")
    guard = FormGuard(CSRF_COOKIE, path=prefix, origins=[service.base_url], secure=over_https)

    def failed(request: Request, outcome: Failed, opener: str | None, *, back: str | None = None) -> Response:
        """The page saying why not; with the development sign-in and nobody signed in, its link, and (`back`, the
        link opened) the cookie that brings the person back to it once signed in."""
        sign_in = f"{prefix}{DevelopmentSignIn.PATH}" if development is not None and opener is None else None
        kept = None if sign_in is None or back is None or development is None else development.return_value(back)
        context = {"message": outcome.message, "sign_in_url": sign_in, "comes_back": kept is not None}
        response = _KIT.page(request, "failed.html", context, status=outcome.status_code)
        if kept is not None:
            response.set_cookie(
                DevelopmentSignIn.RETURN_COOKIE,
                kept,
                max_age=_RETURN_TTL,
                path=f"{prefix}{DevelopmentSignIn.PATH}",
                httponly=True,
                samesite="strict",
                secure=over_https or request.url.scheme == "https",
            )
        return response

    def refused(request: Request, refusal: FormRefusal) -> Response:
        return _KIT.page(request, "refused.html", {"reason": _REFUSALS[refusal]}, status=403)

    def browser_of(request: Request) -> str | None:
        value = request.cookies.get(BROWSER_COOKIE, "")
        return value if _BROWSER_VALUE.fullmatch(value) else None

    async def start(request: Request) -> Response:
        opener = await verifier(request)
        here = f"{request.url.path}?{request.url.query}" if request.url.query else request.url.path
        if opener is None and development is None and isinstance(verifier, SignIn):
            sign_in = verifier.sign_in_url(request, here)
            if sign_in is not None:
                return _KIT.redirect(sign_in)
        browser = browser_of(request) or secrets.token_urlsafe(32)
        outcome = await service.start(request.query_params.get("t", ""), opener=opener, browser=browser)
        if isinstance(outcome, Failed):
            return failed(request, outcome, opener, back=here)
        if isinstance(outcome, Redirect):
            response: Response = _KIT.redirect(outcome.url)
        else:
            key_form = {
                "label": outcome.connection.label,
                "name": outcome.connection.name,
                "state": outcome.state,
                "action": f"{prefix}/key",
                "cancel_url": f"{prefix}/cancel",
            }
            response = _KIT.form_page(request, guard, "key_form.html", key_form)
        # Lax, not Strict: the provider sends the person back with a top-level cross-site GET, which must carry it.
        response.set_cookie(
            BROWSER_COOKIE,
            browser,
            max_age=max(1, int(service.provider_visit_ttl)) + _BROWSER_KEPT_AFTER_VISIT,
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
            return failed(request, outcome, opener)
        return _done(request, outcome.account)

    async def key(request: Request) -> Response:
        opener = await verifier(request)
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        if (refusal := guard.check(request, form)) is not None:
            return refused(request, refusal)
        state, entered = form.get("state"), form.get("key")
        try:
            outcome = await service.finish_key(
                state=state if isinstance(state, str) else None,
                key=entered if isinstance(entered, str) else "",
                opener=opener,
                browser=browser_of(request),
            )
        except InvalidParamsError as exc:  # a key the provider's header cannot carry; its message names no key
            message = f"{exc} Nothing was connected. Ask your assistant again for a new link."
            return failed(request, Failed(message), opener)
        if isinstance(outcome, Failed):
            return failed(request, outcome, opener)
        return _done(request, outcome.account)

    async def cancel(request: Request) -> Response:
        return _KIT.page(request, "cancelled.html")

    async def sign_in(request: Request) -> Response:
        assert development is not None
        # The link opened before signing in, kept by `failed`: never written in this page (it holds the link's token).
        kept = development.return_path(request.cookies.get(DevelopmentSignIn.RETURN_COOKIE))
        page: dict[str, Any] = {
            "action": f"{prefix}{DevelopmentSignIn.PATH}",
            "current": await development(request),
            "problem": None,
            "comes_back": kept is not None,
        }
        if request.method == "GET":
            page["next_path"] = safe_next_path(request.query_params.get("next"))
            return _KIT.form_page(request, guard, "sign_in.html", page)
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        if (refusal := guard.check(request, form)) is not None:
            return refused(request, refusal)
        user = str(form.get("user") or "").strip()
        next_path = safe_next_path(str(form.get("next") or ""))
        if not _USER.fullmatch(user):
            page["next_path"] = next_path
            page["problem"] = "Type a user name of 1 to 64 letters, digits, '_', '.', '@' or '-'."
            return _KIT.form_page(request, guard, "sign_in.html", page, status=400)
        if form.get("next") or kept is None:
            # A `next` given goes first, to a path here only (refused, the page says who is signed in).
            response: Response = (
                _KIT.redirect(next_path)
                if next_path is not None
                else _KIT.page(request, "signed_in.html", {"user": user, "back_url": None})
            )
            forget_way_back(request, response)
        else:
            # Not a redirect: after a form's post the browser would refuse the link's own redirect to a provider
            # (the page's `form-action 'self'` holds for every redirect that follows the post). The page takes the
            # person on by itself, with a link to follow where it does not.
            back_url = f"{prefix}{DevelopmentSignIn.PATH}{_BACK}"
            response = _KIT.page(request, "signed_in.html", {"user": user, "back_url": back_url})
        response.set_cookie(
            DevelopmentSignIn.COOKIE,
            development.cookie_value(user),
            path="/",
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    async def way_back(request: Request) -> Response:
        """Back to the link kept before signing in; without one, to the sign-in page (never anywhere else)."""
        assert development is not None
        kept = development.return_path(request.cookies.get(DevelopmentSignIn.RETURN_COOKIE))
        response = _KIT.redirect(kept if kept is not None else f"{prefix}{DevelopmentSignIn.PATH}")
        forget_way_back(request, response)
        return response

    def forget_way_back(request: Request, response: Response) -> None:
        if DevelopmentSignIn.RETURN_COOKIE in request.cookies:
            response.delete_cookie(
                DevelopmentSignIn.RETURN_COOKIE,
                path=f"{prefix}{DevelopmentSignIn.PATH}",
                httponly=True,
                samesite="strict",
                secure=over_https or request.url.scheme == "https",
            )

    routes = [
        Route("/start", start, methods=["GET"]),
        Route("/callback", callback, methods=["GET"]),
        Route("/key", key, methods=["POST"]),
        Route("/cancel", cancel, methods=["GET"]),
    ]
    if development is not None:
        routes.append(Route(DevelopmentSignIn.PATH, sign_in, methods=["GET", "POST"]))
        routes.append(Route(f"{DevelopmentSignIn.PATH}{_BACK}", way_back, methods=["GET"]))
    return _KIT.app(routes, max_body=MAX_FORM_BYTES, problem=_problem)
