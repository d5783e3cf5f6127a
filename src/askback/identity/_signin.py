"""`PeopleSignIn`: people signed in on the pages askback hosts, through OpenID Connect at an issuer.

The flow is the authorization code flow with PKCE (S256), a `state` and a `nonce`:

1. a page finds nobody signed in and sends the person to `{prefix}/sign-in?next=/the/page` (`sign_in_url`);
2. that answers 303 to the issuer's authorization endpoint, and keeps what the way back needs (`state`, `nonce`,
   `next`) in a cookie of its own, signed, HttpOnly, SameSite=Lax, for ten minutes and only for `{prefix}/callback`;
   the PKCE verifier is derived from `state` under the session secret, so no cookie holds it;
3. the issuer sends the person back to `{prefix}/callback?code&state`: the state must be the one this browser's
   cookie holds (a callback brought by another browser, or after ten minutes, is refused), the code is redeemed at
   the token endpoint (client_secret_basic, with the verifier), and the ID token verified (signature against the
   issuer's published keys, `iss`, `aud`, times, `nonce`);
4. a session begins in the shared store (`_sessions`: the person and the groups the ID token's
   `ASKBACK_SIGNIN_GROUPS_CLAIM` lists, odd names and those past 64 dropped (`_groups`), for `ASKBACK_SESSION_TTL`,
   at most `ASKBACK_SESSIONS_PER_PERSON` of them), the session cookie `askback_session` is set (its random id, signed;
   HttpOnly, SameSite=Lax, Secure unless the site is plain http on loopback, Path=/) and the person sent (303) back
   to `next`, a path on this site only.

`POST {prefix}/sign-out` (from the form at `GET {prefix}/sign-out`, through `askback.web.asgi.FormGuard`) ends the
session in the store, for every copy of the cookie on every instance, and clears the cookie. A provider's `error=`, a bad state or an ID token that does not verify is a problem page, and nothing
is set. Nothing the issuer sends (a code, a token) is ever written in a page or a message.

`PeopleSignIn` is an `askback.web.pages.SignIn` (who is signed in, where to sign in) for the account pages and the web
inbox, a `PersonSignIn` (who, with their groups, signed in by `oidc <issuer>`) for the approvals' pages, and an
`askback.extension.Extension` that keeps its sessions in the app's store (its own migrations) and serves these routes
`Open()` under `prefix`. Its settings are one `SignInSettings` (`_signin_settings`), whoever reads them; the issuer's
metadata, keys and token endpoint are reached through `SignInIssuer` (`_signin_issuer`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from askback.clock import Clock, SystemClock
from askback.core.caller import principal_of
from askback.errors import ConfigurationError, InvalidTokenError, IssuerUnavailableError
from askback.extension import ExtensionContext, Mounted, Open, Ports
from askback.identity import schema
from askback.identity._groups import MAX_GROUPS, claimed_groups
from askback.identity._holdback import HoldBack
from askback.identity._jwt import verify_id_token
from askback.identity._session import PENDING_TTL, PendingSignIn, SessionSigner, code_challenge
from askback.identity._sessions import Sessions
from askback.identity._signin_issuer import DISCOVERY_INTERVAL, SignInIssuer
from askback.identity._signin_settings import SignInSettings
from askback.web.asgi import FormGuard
from askback.web.pages import PageKit, SignedInPerson, safe_next_path

__all__ = ["PeopleSignIn"]

logger = logging.getLogger("askback.identity")

_KIT = PageKit(Path(__file__).parent / "templates", title_suffix=" · askback")
_MAX_FORM_BYTES = 4 * 1024
_PENDING_COOKIE = "askback_sign_in_"
_ERROR_CODE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")

_PROBLEMS: Mapping[int, tuple[str, str]] = {
    403: ("Refused", "This form was not sent from a page of this site in this browser, so it was refused."),
    404: ("Page not found", "There is no page at this address."),
    405: ("Not allowed", "This page cannot be used that way."),
    413: ("Too much was sent", "The form sent more than this page accepts."),
}
_PROBLEM = ("Something went wrong", "The request could not be handled. Nobody was signed in.")


def _problem(request: Request, status: int) -> Response:
    title, text = _PROBLEMS.get(status, _PROBLEM)
    return _KIT.page(request, "problem.html", {"title": title, "text": text, "again": None}, status=status)


class PeopleSignIn:
    """People signed in through OpenID Connect at `issuer`, as the client `client_id` (see the module's docstring).

    `base_url` is where people reach the site (https, or http on loopback for development): the redirect URI
    registered at the issuer is `{base_url}{prefix}/callback`. `session_secret` (at least 32 bytes, the same on
    every instance) signs the cookies; `principal_claim` of the ID token names the person and `groups_claim` lists
    their groups (kept with the session: `person`); a session lasts `session_ttl` seconds and one person holds at
    most `sessions_per_person` (both from the settings it is started with when `None`: `ASKBACK_SESSION_TTL`,
    `ASKBACK_SESSIONS_PER_PERSON`). `http` is the client for the issuer (one of its own when `None`, closed by
    `close`). Sessions live in the store it is started with (`start`), so it serves nobody before it starts.

    The person is a principal as `askback.core.caller.principal_of` spells it, the deployment's home issuer being
    `tokens_issuer` (the issuer of `/mcp`'s tokens, `ASKBACK_AUTH_ISSUER`) when one is given, else `issuer`: people
    of an issuer other than the tokens' are `<issuer>#<sub>`, and never open what a token of another issuer owns."""

    name = "sign-in"
    migrations = (schema.MIGRATIONS,)
    COOKIE = "askback_session"

    def __init__(
        self,
        *,
        issuer: str,
        client_id: str,
        client_secret: SecretStr,
        base_url: str,
        session_secret: SecretStr | str | bytes,
        principal_claim: str = "sub",
        groups_claim: str = "groups",
        tokens_issuer: str | None = None,
        session_ttl: float | None = None,
        sessions_per_person: int | None = None,
        prefix: str = "/auth",
        http: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> None:
        settings = SignInSettings.given(
            issuer=issuer,
            client_id=client_id,
            client_secret=client_secret,
            base_url=base_url,
            session_secret=session_secret,
            principal_claim=principal_claim,
            groups_claim=groups_claim,
            tokens_issuer=tokens_issuer,
        )
        self._take(settings, session_ttl, sessions_per_person, prefix, http, clock)

    @classmethod
    def of(
        cls,
        settings: SignInSettings,
        *,
        session_ttl: float | None = None,
        sessions_per_person: int | None = None,
        prefix: str = "/auth",
        http: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> PeopleSignIn:
        """The sign-in `settings` describe (`SignInSettings.from_environ`, as `from_settings` reads them)."""
        made = cls.__new__(cls)
        made._take(settings, session_ttl, sessions_per_person, prefix, http, clock)
        return made

    def _take(
        self,
        settings: SignInSettings,
        session_ttl: float | None,
        sessions_per_person: int | None,
        prefix: str,
        http: httpx.AsyncClient | None,
        clock: Clock | None,
    ) -> None:
        if session_ttl is not None and session_ttl <= 0:
            raise ConfigurationError("The people's sign-in needs a session lifetime above 0 seconds.")
        if sessions_per_person is not None and sessions_per_person < 1:
            raise ConfigurationError("The people's sign-in needs at least one session per person.")
        self.settings = settings
        self.issuer = settings.issuer
        self.client_id = settings.client_id
        self._signer = SessionSigner(settings.session_secret.get_secret_value())
        self.base_url = settings.base_url
        self.prefix = "/" + prefix.strip("/")
        self.principal_claim = settings.principal_claim
        self.groups_claim = settings.groups_claim
        self.method = f"oidc {settings.issuer}"
        self._ttl_given, self._per_person_given = session_ttl, sessions_per_person
        self.session_ttl = float(session_ttl or 8 * 3600.0)
        self.sessions_per_person = sessions_per_person or 10
        self._sessions: Sessions | None = None
        self.home_issuer = settings.home_issuer
        self.secure = settings.secure
        self._site_path = urlsplit(settings.base_url).path.rstrip("/")
        self.redirect_uri = f"{self.base_url}{self.prefix}/callback"
        self._clock: Clock = clock or SystemClock()
        self._issuer = SignInIssuer(
            settings.issuer,
            client_id=settings.client_id,
            client_secret=settings.client_secret,
            clock=self._clock,
            http=http,
        )
        self._warning_hold = HoldBack(self._clock, DISCOVERY_INTERVAL)
        self._guard = FormGuard(
            "askback_sign_in_csrf", path=f"{self._site_path}{self.prefix}", origins=[self.base_url], secure=self.secure
        )
        self.app = self._build_app()
        self.mounts = (Mounted(self.prefix, self.app, auth=Open(), public_url=self.base_url),)
        self.ports = Ports()

    def __repr__(self) -> str:
        return f"PeopleSignIn(issuer={self.issuer!r}, client_id={self.client_id!r})"

    @classmethod
    def from_settings(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        prefix: str = "/auth",
        http: httpx.AsyncClient | None = None,
        clock: Clock | None = None,
    ) -> PeopleSignIn:
        """The sign-in configured by `environ` (the process's environment when `None`), as `SignInSettings` reads
        it: the issuer `ASKBACK_SIGNIN_ISSUER` (people's issuer, when it is not the tokens' one) else
        `ASKBACK_AUTH_ISSUER`, `ASKBACK_SIGNIN_CLIENT_ID`, `ASKBACK_SIGNIN_CLIENT_SECRET`, `ASKBACK_SESSION_SECRET`,
        `ASKBACK_PUBLIC_URL`, `ASKBACK_AUTH_PRINCIPAL_CLAIM` (default `sub`) and `ASKBACK_SIGNIN_GROUPS_CLAIM` (default
        `groups`); `ASKBACK_AUTH_ISSUER` is the tokens'
        issuer, whose subjects are bare principals. A missing or wrong value is a `ConfigurationError` naming it."""
        return cls.of(SignInSettings.from_environ(environ), prefix=prefix, http=http, clock=clock)

    # --- the extension ----------------------------------------------------------------------------------------------

    async def start(self, context: ExtensionContext) -> None:
        """Keep sessions in `context.store`, for as long as its settings say unless given. The issuer's metadata is
        read on the first sign-in (an issuer down at start-up is a page saying so, not a server that does not
        start)."""
        settings = context.settings
        self.session_ttl = float(self._ttl_given or settings.session_ttl)
        self.sessions_per_person = self._per_person_given or settings.sessions_per_person
        self._sessions = Sessions(context.store.database)
        if self.home_issuer != self.issuer:
            issuers = (self.issuer, self.issuer, self.home_issuer)
            logger.info("people signed in at %s are the principals %s#<subject>, apart from those of %s", *issuers)

    def _store(self) -> Sessions:
        if self._sessions is None:
            raise ConfigurationError(
                "The people's sign-in was not started, so it has nowhere to keep sessions: give it to "
                "Askback(..., extensions=[...]), or start it with the store (PeopleSignIn.start)."
            )
        return self._sessions

    async def close(self) -> None:
        """Close the HTTP client of its own, if it made one."""
        await self._issuer.close()

    # --- the SignIn -------------------------------------------------------------------------------------------------

    async def __call__(self, request: Request) -> str | None:
        session_id = self._signer.session_id_of(request.cookies.get(self.COOKIE))
        if session_id is None:
            return None
        return await self._store().principal_of(session_id, now=self._clock.now())

    async def person(self, request: Request) -> SignedInPerson | None:
        """The person signed in on `request`, with the groups their sign-in gave them, while the session lasts."""
        session_id = self._signer.session_id_of(request.cookies.get(self.COOKIE))
        if session_id is None:
            return None
        found = await self._store().person_of(session_id, now=self._clock.now())
        if found is None:
            return None
        return SignedInPerson(found[0], found[1], self.method)

    def sign_in_url(self, request: Request, next_path: str) -> str | None:
        """`{prefix}/sign-in`, coming back to `next_path` when it is a path on this site (else to `/`)."""
        back = safe_next_path(next_path) or "/"
        return f"{self._site_path}{self.prefix}/sign-in?{urlencode({'next': back})}"

    async def session_cookie(self, principal: str, groups: frozenset[str] = frozenset()) -> str:
        """The value of a session cookie that signs `principal` (in `groups`) in from now: a session begun in the
        store as a sign-in begins one (for a deployment's own tests)."""
        return self._signer.session_value(await self._begin(principal, groups))

    async def _begin(self, principal: str, groups: frozenset[str]) -> str:
        return await self._store().begin(
            principal, now=self._clock.now(), ttl=self.session_ttl, per_person=self.sessions_per_person, groups=groups
        )

    async def _redeem(self, code: str, state: str) -> str:
        """The ID token the issuer's token endpoint gives for `code`."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": self._signer.code_verifier(state),
        }
        return await self._issuer.redeem(form)

    # --- the routes -------------------------------------------------------------------------------------------------

    def _failed(self, request: Request, status: int, title: str, text: str) -> Response:
        again = f"{self._site_path}{self.prefix}/sign-in"
        return _KIT.page(request, "problem.html", {"title": title, "text": text, "again": again}, status=status)

    def _unavailable(self, request: Request, exc: IssuerUnavailableError) -> Response:
        if self._warning_hold.allows():  # one line per interval, however many visits fail
            self._warning_hold.tried()
            logger.warning("people's sign-in: %s", exc)
        response = self._failed(
            request,
            503,
            "Sign-in unavailable",
            "The sign-in provider cannot be reached or answered badly just now. Nobody was signed in. Try again in "
            "a moment.",
        )
        response.headers["Retry-After"] = str(exc.retry_after)
        return response

    def _pending_cookie(self, state: str) -> str:
        # One cookie per sign-in under way, so a person signing in from two tabs comes back in both.
        return f"{_PENDING_COOKIE}{state[:16]}"

    async def _sign_in(self, request: Request) -> Response:
        try:
            metadata, _ = await self._issuer.metadata()
        except IssuerUnavailableError as exc:
            return self._unavailable(request, exc)
        assert metadata.authorization_endpoint is not None
        next_path = safe_next_path(request.query_params.get("next")) or "/"
        pending = PendingSignIn.new(next_path, now=self._clock.now())
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.client_id,
                "redirect_uri": self.redirect_uri,
                "scope": "openid",
                "state": pending.state,
                "nonce": pending.nonce,
                "code_challenge": code_challenge(self._signer.code_verifier(pending.state)),
                "code_challenge_method": "S256",
            }
        )
        joiner = "&" if "?" in metadata.authorization_endpoint else "?"
        response = _KIT.redirect(f"{metadata.authorization_endpoint}{joiner}{query}")
        # Lax, not Strict: the issuer sends the person back with a top-level cross-site GET, which must carry it.
        response.set_cookie(
            self._pending_cookie(pending.state),
            self._signer.pending_value(pending),
            max_age=int(PENDING_TTL),
            path=f"{self._site_path}{self.prefix}/callback",
            httponly=True,
            samesite="lax",
            secure=self.secure,
        )
        return response

    async def _callback(self, request: Request) -> Response:
        query = request.query_params
        state = query.get("state") or ""
        cookie = self._pending_cookie(state)
        pending = self._signer.pending_of(request.cookies.get(cookie), state=state, now=self._clock.now())
        error = query.get("error")
        if error is not None:
            said = error if len(error) <= 64 and set(error) <= _ERROR_CODE_CHARS else "an error"
            response = self._failed(
                request,
                400,
                "Not signed in",
                f"The sign-in provider did not sign you in (it said {said}). Nobody was signed in.",
            )
        elif pending is None:
            return self._failed(
                request,
                400,
                "Not signed in",
                "This sign-in was not started in this browser, or it took longer than ten minutes. Nobody was signed "
                "in. Open the page you wanted again to sign in.",
            )
        elif query.get("iss") not in (None, self.issuer):
            # RFC 9207: an answer from another issuer (a mix-up), whatever the code would have been.
            response = self._failed(request, 400, "Not signed in", "The sign-in came back from another provider.")
        else:
            response = await self._finish(request, pending, query.get("code") or "")
        response.delete_cookie(
            cookie, path=f"{self._site_path}{self.prefix}/callback", httponly=True, samesite="lax", secure=self.secure
        )
        return response

    async def _finish(self, request: Request, pending: PendingSignIn, code: str) -> Response:
        if not code:
            return self._failed(
                request, 400, "Not signed in", "The sign-in provider sent no code. Nobody was signed in."
            )
        try:
            _, keys = await self._issuer.metadata()
            id_token = await self._redeem(code, pending.state)
            claims = await verify_id_token(
                id_token,
                keys=keys,
                issuer=self.issuer,
                client_id=self.client_id,
                nonce=pending.nonce,
                now=self._clock.now(),
            )
        except IssuerUnavailableError as exc:
            return self._unavailable(request, exc)
        except InvalidTokenError as exc:
            logger.warning("people's sign-in refused: %s", exc)
            return self._failed(
                request,
                400,
                "Not signed in",
                f"The sign-in could not be completed: {exc}. Nobody was signed in.",
            )
        principal = claims.get(self.principal_claim)
        try:
            person = principal_of(principal, self.issuer, home=self.home_issuer) if isinstance(principal, str) else None
        except ValueError:
            person = None
        if person is None:
            return self._failed(
                request,
                400,
                "Not signed in",
                f"The sign-in provider did not say who you are in a name askback can keep (the claim "
                f"{self.principal_claim} of its ID token). "
                "Nobody was signed in.",
            )
        claimed = claimed_groups(claims.get(self.groups_claim))
        if claimed.dropped:
            # The count only: a name refused for holding odd characters has no place in a log line either.
            what = (
                "is not a list of names, so no group was kept"
                if claimed.malformed
                else f"held {claimed.dropped} name(s) that were dropped (not a name, too long, or past {MAX_GROUPS})"
            )
            logger.warning(
                "people's sign-in: the ID token's claim %s %s",
                self.groups_claim,
                what,
                extra={"dropped": claimed.dropped},
            )
        session_id = await self._begin(person, claimed.groups)
        response = _KIT.redirect(safe_next_path(pending.next_path) or "/")
        response.set_cookie(
            self.COOKIE,
            self._signer.session_value(session_id),
            max_age=int(self.session_ttl),
            path="/",
            httponly=True,
            samesite="lax",
            secure=self.secure,
        )
        return response

    async def _sign_out_page(self, request: Request) -> Response:
        page = {"action": f"{self._site_path}{self.prefix}/sign-out", "current": await self(request)}
        return _KIT.form_page(request, self._guard, "sign_out.html", page)

    async def _sign_out(self, request: Request) -> Response:
        form = await request.form(max_files=0, max_fields=4, max_part_size=1024)
        if self._guard.check(request, form) is not None:
            return _problem(request, 403)
        session_id = self._signer.session_id_of(request.cookies.get(self.COOKIE))
        if session_id is not None:
            await self._store().end(session_id)
        response = _KIT.page(request, "signed_out.html")
        response.delete_cookie(self.COOKIE, path="/", httponly=True, samesite="lax", secure=self.secure)
        return response

    def _build_app(self) -> Starlette:
        routes = [
            Route("/sign-in", self._sign_in, methods=["GET"]),
            Route("/callback", self._callback, methods=["GET"]),
            Route("/sign-out", self._sign_out_page, methods=["GET"]),
            Route("/sign-out", self._sign_out, methods=["POST"]),
        ]
        return _KIT.app(routes, max_body=_MAX_FORM_BYTES, problem=_problem)
