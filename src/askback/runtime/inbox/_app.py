"""The web inbox's routes: who opens a page, which question it is, and what the runtime makes of an answer."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp

from askback.errors import CallError, CallStateError, InvalidAnswerError, UnknownCallError, UnsafeLinkError
from askback.extension import Mounted
from askback.runtime.call_status import Move, allows
from askback.runtime.calls import Claimed, Runtime
from askback.runtime.inbox import _view
from askback.runtime.inbox._forms import Refused, read_answer, refused_by_the_runtime
from askback.runtime.parked_calls import CallRecord
from askback.runtime.questions import ParkedQuestion
from askback.web.asgi import AllowedHosts, FormGuard, HostGuard
from askback.web.pages import PageKit, SignIn

log = logging.getLogger("askback.runtime.inbox")

# A form of a few dozen fields is a few kilobytes.
_MAX_FORM_BYTES = 64 * 1024
_CSRF_COOKIE = "askback_inbox_csrf"

_KIT = PageKit(Path(__file__).parent / "templates", title_suffix=" · askback inbox")

Principal = Callable[[Request], str | Awaitable[str | None] | None] | SignIn
"""Who opens a page: a callable naming the person (or `None`), or a `SignIn`, which also says where to sign in."""


class _InputKey(Convertor[str]):
    """A question's input key in a page's path: whatever the server chose, line breaks included (Starlette's `path`
    convertor stops at one, and its pattern's `$` matches before a final one), a key of dots alone as
    `_view.key_segment` writes it."""

    regex = "[\\s\\S]+"

    def convert(self, value: str) -> str:
        return _view.key_of(value)

    def to_string(self, value: str) -> str:
        return _view.key_segment(value)


register_url_convertor("input_key", _InputKey())


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _problem(request: Request, status: int, **more: Any) -> Response:
    return _KIT.page(request, "problem.html", _view.problem(status, _base(request), **more), status=status)


class _Inbox:
    """The pages over one runtime's parked calls, for the person `principal(request)` names."""

    def __init__(self, runtime: Runtime, principal: Principal, resume: bool, hosts: AllowedHosts) -> None:
        self.runtime = runtime
        self._principal = principal
        self.resume = resume
        public = runtime.settings.public_url
        self.guard = FormGuard(_CSRF_COOKIE, path="/", origins=[public] if public else [], hosts=hosts)

    async def principal(self, request: Request) -> str | None:
        found = self._principal(request)
        return await found if inspect.isawaitable(found) else found

    def nobody(self, request: Request) -> Response:
        """The answer to a page opened by nobody signed in: to the sign-in and back to the page when there is one,
        else the page saying so (401)."""
        if isinstance(self._principal, SignIn):
            # The path as the browser sent it, percent-encoded: decoded, a key's line break or `%2F` would be lost.
            path = request.scope.get("raw_path") or quote(request.url.path).encode()
            here = path.decode("latin-1") + (f"?{request.url.query}" if request.url.query else "")
            sign_in = self._principal.sign_in_url(request, here)
            if sign_in is not None:
                return _KIT.redirect(sign_in)
        return _problem(request, 401)

    async def asked(self, person: str, call_id: str, round_: int, key: str) -> _view.Asked | CallRecord | None:
        """The person's pending question; their call when it no longer waits on that question; None when there is no
        such call of theirs (another person's call is None too: never revealed)."""
        held = self.runtime.held.get(call_id)
        if held is not None:
            q = held.question
            if held.principal != person or q.round != round_ or q.key != key:
                return None
            return self.shown(q, _view.HELD, held.deadline)
        try:
            record = await self.runtime.calls.get(call_id)
        except UnknownCallError:
            return None
        if record.principal != person:
            return None
        question = next((q for q in record.questions if q.round == round_ and q.key == key), None)
        if question is None or not allows(record.status, Move.ANSWER):
            return record
        if key in await self.runtime.calls.answers(call_id, round_):
            return record
        return self.shown(question, _view.asker(record.method, record.target), record.deadline)

    def shown(self, q: ParkedQuestion, asker: str, deadline: float | None) -> _view.Asked:
        if q.mode != "url":
            return _view.Asked(q, asker, deadline)
        try:
            return _view.Asked(q, asker, deadline, link=self.runtime.link(q))
        except (UnsafeLinkError, InvalidAnswerError) as exc:
            return _view.Asked(q, asker, deadline, unsafe=str(exc))

    def question_page(
        self, request: Request, item: _view.Asked, status: int = 200, refused: Refused | None = None
    ) -> Response:
        shown = refused or Refused()
        page = _view.question(_base(request), item, values=shown.values, errors=shown.errors, problem=shown.problem)
        return _KIT.form_page(request, self.guard, "question.html", page, status=status)

    def gone(self, request: Request, call_id: str) -> Response:
        link = (_view.call_path(_base(request), call_id), "See what came of the call")
        return _problem(request, 409, link=link)

    async def listing(self, request: Request) -> Response:
        person = await self.principal(request)
        if person is None:
            return self.nobody(request)
        items = [
            self.shown(p.question, _view.HELD if p.in_memory else _view.asker(p.method, p.target), p.deadline)
            for p in await self.runtime.inbox(principal=person)
        ]
        done = request.query_params.get("done")
        ready = request.query_params.get("ready") == "1"
        return _KIT.page(request, "list.html", _view.listing(_base(request), person, items, done, ready))

    async def show(self, request: Request) -> Response:
        person = await self.principal(request)
        if person is None:
            return self.nobody(request)
        params = request.path_params
        found = await self.asked(person, params["call_id"], params["round"], params["key"])
        if found is None:
            return _problem(request, 404)
        if isinstance(found, CallRecord):
            return self.gone(request, found.id)
        return self.question_page(request, found)

    async def answer(self, request: Request) -> Response:
        base = _base(request)
        form = await request.form(max_files=0)
        if self.guard.check(request, form) is not None:
            return _problem(request, 403)
        person = await self.principal(request)
        if person is None:
            return self.nobody(request)
        params = request.path_params
        call_id, round_, key = params["call_id"], params["round"], params["key"]
        found = await self.asked(person, call_id, round_, key)
        if found is None:
            return _problem(request, 404)
        if isinstance(found, CallRecord):
            return self.gone(request, found.id)
        chosen = read_answer(found, form)
        if isinstance(chosen, Refused):
            return self.question_page(request, found, 400, chosen)
        try:
            waiting = await self.runtime.answer(call_id, key, chosen, round_=round_, by=person)
        except InvalidAnswerError as exc:
            return self.question_page(request, found, 400, refused_by_the_runtime(found, form, exc))
        except CallStateError:
            return self.gone(request, call_id)
        except UnknownCallError:
            return _problem(request, 404)
        if waiting > 0 or call_id in self.runtime.held:
            return _KIT.redirect(f"{base}/?{urlencode({'done': chosen.action})}")
        if not self.resume:
            return _KIT.redirect(f"{base}/?{urlencode({'done': chosen.action, 'ready': '1'})}")
        try:
            outcome = await self.runtime.resume(call_id)
        except CallError as exc:
            log.warning("the inbox could not resume call %s: %s", call_id, exc)
            page = _view.custom_problem(
                "Answer recorded; the call did not go on",
                "Your answer is recorded, but the call could not be sent back to its server:",
                base,
                detail=str(exc),
                link=(_view.call_path(base, call_id), "See the call"),
            )
            return _KIT.page(request, "problem.html", page, status=502)
        flag = "" if isinstance(outcome, Claimed) else "?resumed=1"
        return _KIT.redirect(f"{_view.call_path(base, call_id)}{flag}")

    async def call_page(self, request: Request) -> Response:
        person = await self.principal(request)
        if person is None:
            return self.nobody(request)
        call_id = request.path_params["call_id"]
        try:
            record = await self.runtime.calls.get(call_id)
        except UnknownCallError:
            record = None
        if record is None or record.principal != person:
            return _problem(request, 404)
        pending = [q for q in await self.runtime.pending(principal=person) if q.call_id == call_id]
        resumed = request.query_params.get("resumed") == "1"
        return _KIT.page(request, "call.html", _view.call(_base(request), record, pending, resumed=resumed))


def inbox_app(runtime: Runtime, *, principal: Principal, resume: bool = False, hosts: Sequence[str] = ()) -> ASGIApp:
    """The web inbox over `runtime`'s parked calls. `principal(request)` names the person who opens a page (None:
    nobody is signed in, and the page says how to sign in); a `SignIn` (`askback.identity.PeopleSignIn`) sends that
    person to sign in and back to the page instead, and its own pages (its `mounts`) are served beside the inbox.
    With `resume`, the last answer of a round sends the round back to its server at once; without, `askback inbox
    resume` (or the agent) does.

    Only requests for the loopback names, the runtime's configured hosts (`ASKBACK_ALLOWED_HOSTS`,
    `ASKBACK_PUBLIC_URL`'s, the sign-in's public URL's) and `hosts` are answered (421 otherwise), and a form is
    taken only from those hosts' origins: a page on another name that resolves to this address reaches nothing."""
    beside = [m for m in getattr(principal, "mounts", ()) if isinstance(m, Mounted)]
    allowed = AllowedHosts.configured(runtime.settings, hosts, urls=[m.public_url for m in beside])
    inbox = _Inbox(runtime, principal, resume, allowed)
    routes = [
        Route("/", inbox.listing, methods=["GET"]),
        Route("/q/{call_id}/{round:int}/{key:input_key}", inbox.show, methods=["GET"]),
        Route("/q/{call_id}/{round:int}/{key:input_key}", inbox.answer, methods=["POST"]),
        Route("/calls/{call_id}", inbox.call_page, methods=["GET"]),
    ]
    pages = _KIT.app(routes, max_body=_MAX_FORM_BYTES, problem=_problem)
    if not beside:
        return HostGuard(pages, allowed=allowed)
    # Each mounted app answers with its own headers (its own stylesheet's hash), so it sits beside the inbox's app,
    # which answers every other path (a `Mount("/")` would miss one with a line break: a plain 404, no headers).
    served: list[BaseRoute] = [Mount(m.path, app=m.app) for m in beside]
    app = Starlette(routes=served)
    app.router.default = pages
    app.router.redirect_slashes = False
    return HostGuard(app, allowed=allowed)
