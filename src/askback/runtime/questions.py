"""What a parked round asks and what a person answers, as plain values (no I/O).

A server's `InputRequiredResult` is read once into `ParkedQuestion`s, each named by (call, round, input key): never by
position, so two parallel calls that ask under the same key can never swap answers. An `Answer` is the person's
accept (with content), decline or cancel. `resume_decision` says, from the answers recorded so far and the clock,
whether a round can be sent back: every question answered, or the deadline passed (each unanswered question is
then answered `cancel`).

URL-mode questions are only ever shown: `checked_link` reads a link as a browser does (the WHATWG URL standard, with
`ada-url`: a backslash is a slash, tabs and line breaks are dropped, percent-encoded and IDNA hosts are decoded),
accepts https (plain http only on loopback, in development mode), and gives the host the browser will really reach
with the address to hand it (the parser's serialization, so what is opened is exactly what was checked). The
runtime never opens or fetches a link. Each question also says who asks it (`Origin`: the server's URL and the
name it gives itself, the call it belongs to), for every renderer to show.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

import ada_url

from askback._face import renamed
from askback.core.addresses import is_loopback
from askback.core.questions import connect_key
from askback.errors import UnsafeLinkError
from askback.runtime.forms import problem_text, schema_problems

__all__ = [
    "APPROVAL_KEY_PREFIX",
    "Action",
    "Answer",
    "CheckedLink",
    "Mode",
    "Origin",
    "ParkedQuestion",
    "Ready",
    "Waiting",
    "account_question",
    "approval_question",
    "checked_link",
    "look_decision",
    "pending_questions",
    "resume_decision",
    "safe_link",
    "unreadable_round",
]

Mode = Literal["form", "url"]
Action = Literal["accept", "decline", "cancel"]

_ELICIT = "elicitation/create"


_KINDS = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}


@dataclass(frozen=True)
class Origin:
    """Who asks a question and what for: the server (its URL, and `server_name`, the name it gives itself in its
    `serverInfo`, which is its own claim and shown as such) and the call the question belongs to."""

    server: str
    server_name: str | None
    method: str
    target: str
    arguments: Mapping[str, Any] | None = None

    @property
    def host(self) -> str:
        """The host (and port) of the server's URL, as the runtime reached it; the URL itself when it has none."""
        try:
            return str(ada_url.URL(self.server).host) or self.server
        except ValueError:
            return self.server

    @property
    def kind(self) -> str:
        """'tool', 'prompt' or 'resource'."""
        return _KINDS.get(self.method, "call")

    def call(self, limit: int = 200) -> str:
        """The call as one line of at most about `limit` characters: `tool deploy {"service": "web"}`."""
        arguments = "" if not self.arguments else json.dumps(self.arguments, ensure_ascii=False, default=str)
        head = f"{self.kind} {self.target}"
        if len(head) > limit // 2:
            head = head[: limit // 2 - 1] + "…"
        if len(arguments) > limit - len(head) - 1:
            arguments = arguments[: max(limit - len(head) - 2, 0)] + "…"
        return f"{head} {arguments}" if arguments else head


@dataclass(frozen=True)
class ParkedQuestion:
    """One pending input request of a parked round.

    `mode` is 'form' or 'url' for an elicitation; other methods (sampling, roots) have `mode` None and cannot be
    answered by a person. `schema` is the form's requested schema; `url` the link of a URL-mode question.
    `origin` says which server asks and for which call (None when the question was made without one).
    `problem` says why the question cannot be shown as asked (a form whose schema cannot be rendered, a link that
    is not text): such a question is parked and listed like any other, and can only be declined or cancelled.
    """

    call_id: str
    round: int
    key: str
    method: str
    mode: Mode | None
    message: str
    schema: Mapping[str, Any] | None = None
    url: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict, repr=False)
    origin: Origin | None = field(default=None, compare=False)
    problem: str | None = None

    @property
    def host(self) -> str | None:
        """The host a browser reaches with this URL-mode question's link (read as a browser reads it), whether or
        not the link is safe to show as one (`checked_link` says); None when it has no host a browser would reach."""
        if self.url is None:
            return None
        try:
            return _unicode_host(str(ada_url.URL(self.url).hostname)) or None
        except ValueError:
            return None

    @property
    def ref(self) -> str:
        """`call_id/round/key`: how the inbox and the command line name one question."""
        return f"{self.call_id}/{self.round}/{self.key}"


@dataclass(frozen=True)
class Answer:
    """A person's answer: accept (with the form's content; none for a URL question), decline or cancel."""

    action: Action
    content: Mapping[str, Any] | None = None

    def wire(self) -> dict[str, Any]:
        """The `ElicitResult` as sent in `inputResponses`."""
        if self.action == "accept" and self.content is not None:
            return {"action": "accept", "content": dict(self.content)}
        return {"action": self.action}


def pending_questions(
    call_id: str, round_: int, pending: Mapping[str, Any], *, origin: Origin | None = None
) -> tuple[ParkedQuestion, ...]:
    """The questions of an `InputRequiredResult` (as its JSON, by alias), in the server's key order. Whatever the
    JSON holds, each question is read: one that cannot be shown as asked carries its `problem`."""
    requests = pending.get("inputRequests")
    found: list[ParkedQuestion] = []
    for key, request in (requests if isinstance(requests, Mapping) else {}).items():
        request = request if isinstance(request, Mapping) else {}
        method = request.get("method")
        method = method if isinstance(method, str) else ""
        params = request.get("params")
        params = params if isinstance(params, Mapping) else {}
        mode: Mode | None = None
        if method == _ELICIT:
            mode = "url" if params.get("mode") == "url" else "form"
        message = params.get("message")
        schema = params.get("requestedSchema") if mode == "form" else None
        url = params.get("url") if mode == "url" else None
        problem: str | None = None
        if mode == "form" and (wrong := schema_problems(schema)):
            problem = problem_text(wrong)
        if url is not None and not isinstance(url, str):
            problem, url = "its link is not text", None
        found.append(
            ParkedQuestion(
                call_id=call_id,
                round=round_,
                key=str(key),
                method=method,
                mode=mode,
                message=message if isinstance(message, str) else "" if message is None else json.dumps(message),
                schema=schema,
                url=url,
                params=params,
                origin=origin,
                problem=problem,
            )
        )
    return tuple(found)


# An answer is kept under its input key (a column of 255 characters).
_MAX_KEY = 255


def unreadable_round(result: Mapping[str, Any]) -> str | None:
    """What keeps an `InputRequiredResult` (as JSON) from being read as a round of questions at all, or None when
    it can be parked (a question inside it may still be one that cannot be shown: it carries its `problem`).
    Server text is never part of the answer, only what was wrong."""
    requests = result.get("inputRequests")
    if requests is not None and not isinstance(requests, Mapping):
        return "its inputRequests are not an object of questions by key"
    state = result.get("requestState")
    if state is not None and not isinstance(state, str):
        return "its requestState is not a string"
    for key, request in (requests or {}).items():
        if not key or len(key) > _MAX_KEY:
            return f"an input key is empty or longer than {_MAX_KEY} characters"
        if not isinstance(request, Mapping) or not isinstance(request.get("method"), str):
            return "an input request is not an object naming its method"
        if request.get("params") is not None and not isinstance(request["params"], Mapping):
            return "an input request's params are not an object"
    return None


@dataclass(frozen=True)
class Waiting:
    """The round cannot be sent yet: these keys have no answer and the deadline has not passed."""

    missing: tuple[str, ...]


@dataclass(frozen=True)
class Ready:
    """Send the round: `responses` by input key; `cancelled` are the keys answered `cancel` at the deadline."""

    responses: Mapping[str, Answer]
    cancelled: tuple[str, ...] = ()

    def wire(self) -> dict[str, Any]:
        """The round's `inputResponses` as the wire has them, under the server's keys."""
        return {key: answer.wire() for key, answer in self.responses.items()}


def resume_decision(
    questions: tuple[ParkedQuestion, ...], answers: Mapping[str, Answer], *, now: float, deadline: float | None
) -> Waiting | Ready:
    """Whether a parked round can be sent back now, and with what."""
    missing = tuple(q.key for q in questions if q.key not in answers)
    if not missing:
        return Ready({q.key: answers[q.key] for q in questions})
    if deadline is not None and now >= deadline:
        responses = {q.key: answers.get(q.key, Answer("cancel")) for q in questions}
        return Ready(responses, cancelled=missing)
    return Waiting(missing)


def look_decision(
    questions: tuple[ParkedQuestion, ...],
    answers: Mapping[str, Answer],
    *,
    open_key: str,
    now: float,
    deadline: float | None,
) -> Waiting | Ready:
    """A round sent back to look whether an account is connected now: every question but `open_key` answered, and
    `open_key` sent with no answer, so that the server reads the account's real status and goes on, or asks again.
    An `accept` would say that the person finished, which an event about the account cannot know. Past the round's
    deadline there is no look: the round goes as `resume_decision` sends it then, unanswered questions `cancel`."""
    if deadline is not None and now >= deadline:
        return resume_decision(questions, answers, now=now, deadline=deadline)
    missing = tuple(q.key for q in questions if q.key != open_key and q.key not in answers)
    if missing:
        return Waiting(missing)
    return Ready({q.key: answers[q.key] for q in questions if q.key != open_key})


def account_question(questions: tuple[ParkedQuestion, ...], *, connection: str, label: str) -> ParkedQuestion | None:
    """The URL question of a round that waits for exactly `connection`'s account `label` (`""`: the default one), as
    askback's servers ask it: under `connect_key(connection, label)`. A call parked before labelled links had keys of
    their own waits under the default account's key, and so for the default account only."""
    key = connect_key(connection, label)
    return next((q for q in questions if q.mode == "url" and q.key == key), None)


# The prefix of the wire key of an approval's status link (`askback.core.approving.approval_key`).
APPROVAL_KEY_PREFIX = "askback.approval."
_MAX_APPROVAL_ID = 64


def approval_question(questions: tuple[ParkedQuestion, ...], *, approval_id: str) -> ParkedQuestion | None:
    """The URL question of a round that waits on exactly the approval request `approval_id`, as askback's servers ask
    it: a key under `askback.approval.` whose link is that request's status page (`.../requests/<id>/status`)."""
    if not approval_id or len(approval_id) > _MAX_APPROVAL_ID:
        return None
    for question in questions:
        if question.mode != "url" or not question.key.startswith(APPROVAL_KEY_PREFIX) or question.url is None:
            continue
        try:
            path = str(ada_url.URL(question.url).pathname)
        except ValueError:
            continue
        if path.split("/")[-3:] == ["requests", approval_id, "status"]:
            return question
    return None


@dataclass(frozen=True)
class CheckedLink:
    """A URL question's link as a browser reads it: `href` is what the browser is handed (the WHATWG
    serialization of the link: the address that was checked), `host` the host it reaches, in Unicode, and
    `ascii_host` the same host as it goes on the wire (punycode for an internationalised one)."""

    href: str
    host: str
    ascii_host: str

    @property
    def shown(self) -> str:
        """The host to show beside the link: an internationalised one with its ASCII form beside it, which a
        look-alike cannot imitate (`bücher.example (xn--bcher-kva.example)`)."""
        return self.host if self.host == self.ascii_host else f"{self.host} ({self.ascii_host})"


# Characters a host may hide behind: a browser drops or refuses some of them, but whoever reads the link sees a
# different name. Format characters (bidirectional marks, zero-width ones, tags, the soft hyphen) and controls are
# found by their category; these are the invisible ones of other categories (fillers, variation selectors).
_INVISIBLE = frozenset(
    "\u034f\u115f\u1160\u17b4\u17b5\u180b\u180c\u180d\u180e\u180f\u2800\u3164\uffa0"
    + "".join(chr(c) for c in range(0xFE00, 0xFE10))
)


def _hidden_in(text: str) -> str | None:
    """The first character of `text` that cannot be seen or reorders what is around it, as `U+XXXX`."""
    for char in text:
        category = unicodedata.category(char)
        if category in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp") or char in _INVISIBLE or 0xE0100 <= ord(char) <= 0xE01EF:
            return f"U+{ord(char):04X}"
        if category == "Zs" and char != " ":
            return f"U+{ord(char):04X}"
    return None


_C0_AND_SPACE = "".join(chr(c) for c in range(0x21))


def _raw_authority(url: str) -> str:
    """The part of `url` as written that a browser reads as user-info, host and port: after the scheme and its
    slashes (or backslashes), up to the path, query or fragment; percent-escapes decoded, as they are in a host."""
    text = url.strip(_C0_AND_SPACE)
    text = text.replace("\t", "").replace("\n", "").replace("\r", "")
    _, colon, rest = text.partition(":")
    if not colon:
        return ""
    rest = rest.lstrip("/\\")
    end = min((i for i in (rest.find(c) for c in "/\\?#") if i >= 0), default=len(rest))
    return unquote(rest[:end], errors="replace")


def _unicode_host(ascii_host: str) -> str:
    try:
        return str(ada_url.idna_to_unicode(ascii_host)) or ascii_host
    except (ValueError, UnicodeError):
        return ascii_host


def checked_link(url: str, *, development: bool = False) -> CheckedLink:
    """A URL question's link read as a browser reads it, or `UnsafeLinkError` when it must not be shown as a link:
    not a URL a browser can parse, not https (plain http only on a loopback host, and only in development mode), no
    host, credentials in its user-info, or a host written with invisible or bidirectional characters (which a
    browser drops or refuses, so the name read is not the one reached). Nothing is fetched."""
    hidden = _hidden_in(_raw_authority(url))
    if hidden is not None:
        raise UnsafeLinkError(
            f"the link's host is written with an invisible or direction-changing character ({hidden}), so the name "
            "a person reads is not the one the browser reaches; it is not shown as a link"
        )
    try:
        parsed = ada_url.URL(url)
    except ValueError:
        raise UnsafeLinkError(
            "the question's link is not a URL a browser can open; it is not shown as a link"
        ) from None
    ascii_host = str(parsed.hostname)
    host = _unicode_host(ascii_host)
    scheme = str(parsed.protocol).removesuffix(":")
    if scheme not in ("https", "http"):
        raise UnsafeLinkError(
            f"the link uses {scheme or 'no scheme'}: only https links are shown (plain http only on loopback, in "
            "development mode)"
        )
    if not ascii_host:
        raise UnsafeLinkError("the question's link has no host; it is not shown as a link")
    hidden = _hidden_in(host)
    if hidden is not None:
        raise UnsafeLinkError(
            f"the link's host {ascii_host} reads with an invisible or direction-changing character ({hidden}); it is "
            "not shown as a link"
        )
    if parsed.username or parsed.password:
        raise UnsafeLinkError(f"the link to {host} carries credentials in its user-info; it is not shown as a link")
    link = CheckedLink(href=str(parsed.href), host=host, ascii_host=ascii_host)
    if scheme == "https":
        return link
    if scheme == "http" and is_loopback(ascii_host):
        if development:
            return link
        raise UnsafeLinkError(
            f"the link to {host} is plain http: accepted only in development mode (ASKBACK_DEVELOPMENT=1 or "
            "Runtime(development=True))"
        )
    raise UnsafeLinkError(
        f"the link to {host} uses http: only https links are shown (plain http only on loopback, in development mode)"
    )


def safe_link(url: str, *, development: bool = False) -> str:
    """The host to show for a URL-mode question's link (`checked_link(url).shown`: the host a browser reaches, an
    internationalised one with its ASCII form beside it), or `UnsafeLinkError` when the link must not be shown as
    one. Nothing is fetched."""
    return checked_link(url, development=development).shown


_RENAMED = {"Link": "CheckedLink", "check_link": "checked_link"}

if TYPE_CHECKING:  # the old names, typed as the new ones (a module not yet moved to them still checks)
    Link = CheckedLink
    check_link = checked_link
else:

    def __getattr__(name: str) -> Any:
        return renamed(__name__, _RENAMED, name, globals())
