"""The approvals' hosted pages: where an approver sees the requests they may decide and approves or denies one exact
call, and where the requester follows their own request.

`pages_app(service, sign_in, base_url=..., prefix=...)` is a small Starlette app, mounted at `prefix` with an `Open()`
policy (`ApprovalsSetup` mounts it): it asks `sign_in` who opens each page itself. Every decision is the service's
(and the pure `refusal`'s, which says what the page offers); a route reads the request, finds the person, calls the
service and renders the outcome.

- `GET /`: the open requests this person may decide (`ApprovalService.decidable_by`);
- `GET /requests/{id}`: the request (tool, title, summary, arguments with the hidden ones shown as "hidden", the
  requester, the answers given, expiry, the approvals so far out of those required) and, when this person may decide
  it, the approve/deny form carrying a keyed token of the request's id and the digest of what the page shows (the
  digest itself is made from the hidden values too: it would let an approver check a guess of one); else why not. Someone outside the policy gets
  the 404 an unknown id gets;
- `POST /requests/{id}` (form `decision`, `reason`, `digest`: the token, `csrf`): the decision, then what it did;
- `GET /requests/{id}/status`: the requester's own page (404 for anyone else): where the request stands, who must
  approve, and the decisions so far;
- `GET|POST /dev/sign-in?next=<path>`: only with the accounts' development sign-in, whose page it is.

Who the approver is: a `PersonSignIn` (`askback.identity.PeopleSignIn`: the groups of the ID token's groups claim,
method `oidc <issuer>`; the development sign-in: method `development`) says it with their groups; a plain `SignIn` or
principal callable gives the principal (method `sign-in`). To the groups the sign-in gives, `directory` (a group's
name to its members' principals, as `ApprovalsSetup` takes it) adds each group that lists the principal. Nobody
signed in is sent (303) to the sign-in page, to come back to the page they opened.

The pages are the page kit's (`askback.web.pages`): plain server-rendered HTML from `templates/`, no script, every
value escaped, and outside text bounded with odd characters made visible (`_view`). Every response, errors and
redirects included, carries the kit's headers; a body over `MAX_FORM_BYTES` is refused (413); only the loopback names,
`base_url`'s host and `hosts` are answered (`HostGuard`: 421 otherwise, DNS rebinding); every POST passes `FormGuard`
(`Origin`: `base_url`'s, or one of the hosts answered over the scheme and port served; `Sec-Fetch-Site` and this browser's form token in `askback_approvals_csrf`) before anything changes.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from askback.approvals._keys import FORM_TOKEN, derived, keyed
from askback.approvals._view import outcome_of, refusal, refusal_text, refused_outcome, shown_record, shown_text
from askback.approvals.records import ApprovalRecord
from askback.approvals.service import ApprovalService, Approver
from askback.clock import Clock, SystemClock
from askback.core.text import name_problem
from askback.errors import InvalidParamsError
from askback.web.asgi import AllowedHosts, FormGuard, FormRefusal, HostGuard
from askback.web.pages import PageKit, PersonSignIn, SignIn, safe_next_path

__all__ = [
    "CSRF_COOKIE",
    "MAX_FORM_BYTES",
    "MAX_REASON",
    "PAGE_HEADERS",
    "AnyoneSignIn",
    "groups_by_member",
    "pages_app",
]

# A decision form is a reason of at most 500 characters, a digest and a token: a few kilobytes at most.
MAX_FORM_BYTES = 16 * 1024
MAX_REASON = 500
_MAX_FIELD_BYTES = 4 * 1024
_MAX_FIELDS = 8
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_DIGEST = re.compile(r"[0-9a-f]{64}")

_KIT = PageKit(Path(__file__).parent / "templates", title_suffix=" · approvals")

PAGE_HEADERS: Mapping[str, str] = _KIT.headers
"""The headers of every response of the approvals' pages."""

CSRF_COOKIE = "askback_approvals_csrf"
"""The form token's cookie (the same value is in each form's hidden `csrf` field)."""

_REFUSALS: Mapping[FormRefusal, str] = {
    "cross_site": (
        "This form was sent from another site, not from a page of this one, so it was refused. Nothing was decided. "
        "If you meant to decide, open the request here and decide there."
    ),
    "no_token": (
        "This form could not be checked: it was not sent from a page this browser was given here, or this browser "
        "does not keep cookies. Nothing was decided. Open the request again and decide there."
    ),
}

_PROBLEMS: Mapping[int, tuple[str, str]] = {
    401: ("Sign in first", "Sign in to see the requests you may decide."),
    404: ("Page not found", "There is no page at this address, or nothing here that you may see."),
    405: ("Not allowed", "This page cannot be used that way."),
    413: ("Too much was sent", "The form sent more than this page accepts. Nothing was decided."),
}
_PROBLEM = ("Something went wrong", "The request could not be handled. Nothing was decided.")

Decision = Literal["approve", "deny"]


def _problem(request: Request, status: int, sign_in_url: str | None = None) -> Response:
    title, text = _PROBLEMS.get(status, _PROBLEM)
    return _KIT.page(request, "problem.html", {"title": title, "text": text, "sign_in_url": sign_in_url}, status=status)


@runtime_checkable
class AnyoneSignIn(Protocol):
    """A sign-in whose own page lets anyone sign in as any name (the accounts' `DevelopmentSignIn`): the pages serve
    that page at `PATH` and set the cookie `cookie_value` makes; only on a site on loopback (`check_site`)."""

    PATH: str
    COOKIE: str

    def cookie_value(self, user: str) -> str: ...

    def check_site(self, base_url: str) -> None: ...


class _Pages:
    """The routes of `pages_app`, over what it was given."""

    def __init__(
        self,
        service: ApprovalService,
        sign_in: Callable[[Request], Awaitable[str | None]],
        *,
        base: str,
        directory: Mapping[str, frozenset[str]],  # principal -> the groups that list them
        guard: FormGuard,
        clock: Clock,
        token_keys: Sequence[bytes],
    ) -> None:
        self.service = service
        self.token_keys = token_keys
        self.sign_in = sign_in
        self.base = base
        self.directory = directory
        self.guard = guard
        self.clock = clock

    # --- who is here ------------------------------------------------------------------------------------------------

    async def approver(self, request: Request) -> Approver | None:
        if isinstance(self.sign_in, PersonSignIn):
            person = await self.sign_in.person(request)
            if person is None:
                return None
            principal, groups, method = person.principal, person.groups, person.method
        else:
            found = await self.sign_in(request)
            if found is None:
                return None
            principal, groups, method = found, frozenset[str](), "sign-in"
        return Approver(principal, groups | self.directory.get(principal, frozenset()), method)

    def nobody(self, request: Request, back: str | None = None) -> Response:
        """Nobody is signed in: to the sign-in page, coming back to `back` (this page when `None`)."""
        here = back or (f"{request.url.path}?{request.url.query}" if request.url.query else request.url.path)
        url = self.sign_in.sign_in_url(request, here) if isinstance(self.sign_in, SignIn) else None
        if url is not None:
            return _KIT.redirect(url)
        return _problem(request, 401)

    def refused(self, request: Request, why: FormRefusal) -> Response:
        return _KIT.page(
            request, "problem.html", {"title": "Refused", "text": _REFUSALS[why], "sign_in_url": None}, status=403
        )

    # --- the form's token ------------------------------------------------------------------------------------------

    def token(self, record: ApprovalRecord, key: bytes | None = None) -> str:
        """What the form carries for `record`: bound to its id and digest, and, being keyed, no way to check a guess
        of a hidden argument (the digest is made from the hidden values too)."""
        message = f"{record.id}\x00{record.digest}".encode()
        return keyed(key or self.token_keys[0], message)

    def shown_digest(self, record: ApprovalRecord, sent: str) -> str:
        """The digest the page that sent `sent` showed: `record`'s when `sent` is its token under a key of the ring,
        else "" (a forged or stale form, which the service refuses as another call)."""
        found = False
        for key in self.token_keys:
            found |= hmac.compare_digest(self.token(record, key), sent)
        return record.digest if found else ""

    # --- the pages --------------------------------------------------------------------------------------------------

    async def listing(self, request: Request) -> Response:
        approver = await self.approver(request)
        if approver is None:
            return self.nobody(request)
        now = self.clock.now()
        items = [shown_record(record, now) for record in await self.service.decidable_by(approver)]
        page = {"person": shown_text(approver.principal), "items": items, "base": self.base}
        return _KIT.page(request, "list.html", page)

    async def request_page(
        self,
        request: Request,
        approver: Approver,
        approval_id: str,
        *,
        problem: str | None = None,
        reason: str = "",
        status: int = 200,
    ) -> Response:
        record = await self.service.get(approval_id)
        now = self.clock.now()
        why = None if record is None else refusal(record, approver, now)
        if record is None or why == "not_allowed":
            return _problem(request, 404)
        page: dict[str, Any] = {
            "person": shown_text(approver.principal),
            "r": shown_record(record, now, self.token(record)),
            "why": None if why is None else refusal_text(why, record, now),
            "problem": problem,
            "reason": reason,
            "base": self.base,
        }
        if why is not None:
            return _KIT.page(request, "request.html", page, status=status)
        return _KIT.form_page(request, self.guard, "request.html", page, status=status)

    async def show(self, request: Request) -> Response:
        approver = await self.approver(request)
        if approver is None:
            return self.nobody(request)
        approval_id = request.path_params["approval_id"]
        if not _ID.fullmatch(approval_id):
            return _problem(request, 404)
        return await self.request_page(request, approver, approval_id)

    async def decide(self, request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        approver = await self.approver(request)
        if approver is None:
            back = f"{self.base}/requests/{approval_id}" if _ID.fullmatch(approval_id) else None
            return self.nobody(request, back)
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        if (refused := self.guard.check(request, form)) is not None:
            return self.refused(request, refused)
        if not _ID.fullmatch(approval_id):
            return _problem(request, 404)
        decision, reason, digest, problem = _read_decision(form)
        if problem is not None or decision is None:
            kept = reason if name_problem(reason, what="", limit=MAX_REASON) is None else ""
            return await self.request_page(request, approver, approval_id, problem=problem, reason=kept, status=400)
        record = await self.service.get(approval_id)
        now = self.clock.now()
        why = None if record is None else refusal(record, approver, now)
        if record is None or why == "not_allowed":
            return _problem(request, 404)
        if why is not None:
            page = {"outcome": refused_outcome(why, record, now), "id": approval_id, "base": self.base}
            return _KIT.page(request, "outcome.html", page, status=409)
        digest = self.shown_digest(record, digest)
        try:
            decided = await self.service.decide(approver, approval_id, decision, reason, digest=digest)
        except InvalidParamsError as exc:  # what the service cannot store; its message names no stored value
            return await self.request_page(request, approver, approval_id, problem=str(exc), status=400)
        if decided.refusal == "not_allowed":
            return _problem(request, 404)
        outcome = outcome_of(decided, decision, digest, self.clock.now())
        page = {"outcome": outcome, "id": approval_id, "base": self.base}
        return _KIT.page(request, "outcome.html", page, status=200 if outcome.counted else 409)

    async def status(self, request: Request) -> Response:
        approver = await self.approver(request)
        if approver is None:
            return self.nobody(request)
        approval_id = request.path_params["approval_id"]
        record = (
            await self.service.of_requester(approver.principal, approval_id) if _ID.fullmatch(approval_id) else None
        )
        if record is None:
            return _problem(request, 404)
        page = {"person": shown_text(approver.principal), "r": shown_record(record, self.clock.now())}
        return _KIT.page(request, "status.html", page)


def _read_decision(form: FormData) -> tuple[Decision | None, str, str, str | None]:
    """The decision, reason and digest a form sent, and what is wrong with them (`None`: nothing)."""
    sent, reason, digest = form.get("decision"), form.get("reason"), form.get("digest")
    reason = reason.strip() if isinstance(reason, str) else ""
    digest = digest if isinstance(digest, str) and _DIGEST.fullmatch(digest) else ""
    decision: Decision | None = "approve" if sent == "approve" else "deny" if sent == "deny" else None
    if decision is None:
        return None, reason, digest, "Choose Approve or Deny."
    if reason and (problem := name_problem(reason, what="The reason", limit=MAX_REASON)) is not None:
        return decision, reason, digest, f"{problem}: write it again as one line of plain text. Nothing was decided."
    if not digest:
        return decision, reason, digest, "The form did not say which version of the request you decided on."
    return decision, reason, digest, None


def _development_routes(development: AnyoneSignIn, guard: FormGuard, base: str) -> list[Route]:
    """The development sign-in's page, served by these pages (its `sign_in_url` points here)."""
    action = f"{base}{development.PATH}"

    async def sign_in(request: Request) -> Response:
        page: dict[str, Any] = {"action": action, "problem": None}
        if request.method == "GET":
            page["next_path"] = safe_next_path(request.query_params.get("next"))
            return _KIT.form_page(request, guard, "sign_in.html", page)
        form = await request.form(max_files=0, max_fields=_MAX_FIELDS, max_part_size=_MAX_FIELD_BYTES)
        if (why := guard.check(request, form)) is not None:
            title = "Refused"
            return _KIT.page(
                request, "problem.html", {"title": title, "text": _REFUSALS[why], "sign_in_url": None}, status=403
            )
        user = str(form.get("user") or "").strip()
        next_path = safe_next_path(str(form.get("next") or ""))
        try:
            value = development.cookie_value(user)
        except ValueError:
            page["next_path"] = next_path
            page["problem"] = "Type a user name of 1 to 64 letters, digits, '_', '.', '@' or '-'."
            return _KIT.form_page(request, guard, "sign_in.html", page, status=400)
        response = _KIT.redirect(next_path or f"{base}/")
        response.set_cookie(
            development.COOKIE, value, path="/", httponly=True, samesite="lax", secure=request.url.scheme == "https"
        )
        return response

    return [Route(development.PATH, sign_in, methods=["GET", "POST"])]


def groups_by_member(directory: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    """Each principal a `directory` (group -> members) lists, with the groups that list them."""
    found: dict[str, set[str]] = {}
    for group, members in directory.items():
        for member in members:
            found.setdefault(member, set()).add(group)
    return {member: frozenset(groups) for member, groups in found.items()}


def pages_app(
    service: ApprovalService,
    sign_in: Callable[[Request], Awaitable[str | None]],
    *,
    base_url: str,
    prefix: str,
    directory: Mapping[str, Iterable[str]] | None = None,
    clock: Clock | None = None,
    hosts: Iterable[str] = (),
    keys: Sequence[str] = (),
) -> Starlette:
    """The approvals' pages over `service`, to mount at `prefix` with an `Open()` policy (see the module's docstring).

    `sign_in` says who opens a page (a `PersonSignIn` with their groups; else a principal); `directory` maps a group's
    name to its members' principals, and adds to a person's groups each one that lists them; `base_url` is where people reach the site (its origin is the one forms may come from,
    its host one of those answered, with the loopback names and `hosts`); `clock` says what time it is for the pages'
    own checks (the service keeps its own); `keys` is the state key ring (`Settings.key_ring()`), from which the form's
    token key is derived, so that every instance of the site checks the forms of the others (without keys, a random
    key of this process: a form is then good only on the instance that showed it, until it stops)."""
    prefix = "/" + prefix.strip("/")
    development = sign_in if isinstance(sign_in, AnyoneSignIn) else None
    if development is not None:
        development.check_site(base_url)
    over_https = urlsplit(base_url).scheme == "https"
    allowed = AllowedHosts.of(hosts, urls=[base_url])
    # A form may come from `base_url`'s origin or from any host the pages answer (over the scheme and port served).
    guard = FormGuard(CSRF_COOKIE, path=prefix, origins=[base_url], hosts=allowed, secure=over_https)
    people = groups_by_member(directory or {})
    ring = [key.encode() for key in keys] or [secrets.token_bytes(32)]
    token_keys = derived(ring, FORM_TOKEN)
    pages = _Pages(
        service,
        sign_in,
        base=prefix,
        directory=people,
        guard=guard,
        clock=clock or SystemClock(),
        token_keys=token_keys,
    )
    routes = [
        Route("/", pages.listing, methods=["GET"]),
        Route("/requests/{approval_id}", pages.show, methods=["GET"]),
        Route("/requests/{approval_id}", pages.decide, methods=["POST"]),
        Route("/requests/{approval_id}/status", pages.status, methods=["GET"]),
    ]
    if development is not None:
        routes += _development_routes(development, guard, prefix)
    app = _KIT.app(routes, max_body=MAX_FORM_BYTES, problem=_problem)
    app.add_middleware(HostGuard, allowed=allowed, setting="pages_app(hosts=...)")
    return app
