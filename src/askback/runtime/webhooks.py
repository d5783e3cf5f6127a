"""The runtime resumes when the grant lands: a Standard Webhooks receiver, and the same hook for in-process events.

A call parked on a `connect.<name>` URL question waits for a person to come back and say they are done. A server's
connected accounts know sooner: when the account becomes ACTIVE they send `account.connected` (or
`account.recovered`), and this receiver sends back the calls waiting for exactly that account (that server, that
principal, that connection, that label) with the link unanswered (`Runtime.account_active`): the server looks at the
account and goes on, or asks for it again, and the call waits again. Nobody answers the question.

    app = webhook_receiver(runtime, servers={"https://tools.example.com/mcp": ["whsec_..."]})  # POST only
    await resume_on_account_events(runtime, accounts.events(), server="https://tools.example.com/mcp")

A request is believed only when its signature is (https://www.standardwebhooks.com): HMAC-SHA256, keyed with the
base64 secret after `whsec_`, over `{webhook-id}.{webhook-timestamp}.{body}`, matching one of the `v1,<base64>`
signatures of `webhook-signature` under a configured secret (several while one is rotated), compared in constant
time, with a timestamp within `tolerance` seconds of now either way. Anything else is 401 with a short reason, and
nothing is done. `verify` is that decision as a pure function of the headers, the body, the keys and the time. Each
server has its own secrets: the one whose secret signed the event is the server it speaks for, and only calls made
to that server are sent back (`signed_by` picks it, as a pure function too). The previous release's forms, which name
no server (`secrets=`, and `resume_on_account_events` without `server=`), still work, deprecated, bound as narrowly
as the parked calls allow (`askback.runtime._unnamed_server`).

Exactly once: the `webhook-id` is claimed in the runtime's store (`askback_runtime_webhooks`) before anything is done,
so of two processes given the same webhook, or of a webhook and its redelivery, one acts and the others answer 200
`duplicate`. An id is claimed for the server whose secret signed it (`dedupe_key`): each sender counts its ids on its
own, so two servers' ids may be equal, and neither server can claim the other's. The resume runs in the request, bounded by `resume_timeout`, so that a 2xx means it is done: a resume
that fails or runs out of time gives the claim back and answers 503, and the sender's retry does it again, picking up
a call whose question was answered but whose round was not sent. Each call is tried on its own: while some went on,
one that could not is logged and listed `not_resumed`, waiting as it was, or `failed` when its server refused it
for good (the event is taken, 200); when every one failed, 503. Other event types are answered 204 and ignored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets as _random
import warnings
from collections.abc import AsyncIterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, cast

import anyio
from sqlalchemy import Connection, Table, bindparam, delete, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from askback.clock import Clock
from askback.core.connecting import MAX_LABEL_LENGTH
from askback.errors import AskbackError, CallError, ConfigurationError, ResumeDueError
from askback.runtime._models import WebhookRow
from askback.runtime._outcomes import AccountActive, ApprovalDecided, Claimed, Completed, Outcome
from askback.runtime._unnamed_server import UnnamedServer
from askback.runtime.call_status import CallStatus
from askback.runtime.calls import Runtime
from askback.web.asgi import API_HEADERS, AllowedHosts, CappedBody, HostGuard, SecurityHeaders
from askback.web.standard_webhooks import Refused, Verified, verify
from askback.web.standard_webhooks import secret_keys as keys

__all__ = [
    "RECEIVER_PATH",
    "RESUMING_EVENTS",
    "AccountEvent",
    "AccountReady",
    "Ignored",
    "Refused",
    "Unreadable",
    "Verified",
    "account_event",
    "dedupe_key",
    "keys",
    "resume_for",
    "resume_on_account_events",
    "signed_by",
    "verify",
    "webhook_receiver",
]

log = logging.getLogger("askback.runtime.webhooks")

RECEIVER_PATH = "/webhooks/askback"
"""Where `askback inbox serve --webhook-secret-env URL=VAR` serves the receiver."""

RESUMING_EVENTS = frozenset({"account.connected", "account.recovered", "approval.decided"})
"""The event types on which a call parked on connecting that account, or on that approval, is resumed."""
_APPROVAL_DECIDED = "approval.decided"
_MAX_APPROVAL_ID = 64

_MAX_BODY = 256 * 1024
_MAX_ID = 255


# Verification: pure ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AccountReady:
    """A verified event on which calls are resumed: its type (of `RESUMING_EVENTS`) and what it is about: whose
    account became active, or which approval request was decided (the server, from the secret that signed it, is
    added by the receiver)."""

    type: str
    account: AccountActive | ApprovalDecided
    kind: Literal["ready"] = "ready"


@dataclass(frozen=True)
class Ignored:
    """A verified event of another type: answered 204, nothing done."""

    type: str
    kind: Literal["ignored"] = "ignored"


@dataclass(frozen=True)
class Unreadable:
    """A verified body that is not an event the receiver can read (answered 400), and why."""

    reason: str
    kind: Literal["unreadable"] = "unreadable"


def account_event(body: bytes) -> AccountReady | Ignored | Unreadable:
    """What a verified body asks of the runtime. `data.label` is the account's label, `""` (or absent, from an
    older sender) for the default account."""
    try:
        event = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return Unreadable("the body is not JSON")
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        return Unreadable('the body is not an event (an object with a "type")')
    type_: str = event["type"]
    if type_ not in RESUMING_EVENTS:
        return Ignored(type_)
    data = event.get("data")
    if type_ == _APPROVAL_DECIDED:
        requester = data.get("requester") if isinstance(data, dict) else None
        approval_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(approval_id, str) or not approval_id or len(approval_id) > _MAX_APPROVAL_ID:
            return Unreadable(f"{type_} without data.id, an approval request's id")
        if requester is None:
            return Ignored(type_)  # a request nobody signed in made: no parked call is its requester's
        if not isinstance(requester, str) or not requester:
            return Unreadable(f"{type_} whose data.requester is not a principal")
        return AccountReady(type_, ApprovalDecided(requester, approval_id))
    principal = data.get("principal") if isinstance(data, dict) else None
    connection = data.get("connection") if isinstance(data, dict) else None
    if not isinstance(principal, str) or not isinstance(connection, str) or not principal or not connection:
        return Unreadable(f"{type_} without data.principal and data.connection")
    label = data.get("label", "") if isinstance(data, dict) else ""
    if not isinstance(label, str) or len(label) > MAX_LABEL_LENGTH:
        return Unreadable(f"{type_} whose data.label is not a label (a string of at most {MAX_LABEL_LENGTH})")
    return AccountReady(type_, AccountActive(principal, connection, label))


def signed_by(
    headers: Mapping[str, str], body: bytes, *, servers: Mapping[str, tuple[bytes, ...]], now: float, tolerance: float
) -> tuple[str, Verified] | Refused:
    """Which configured server signed the request (`servers`: each server's URL and its keys), with the verdict;
    `Refused` when none did (the reason of the first server's refusal: they differ only in whose keys were tried)."""
    refused: Refused | None = None
    for server, server_keys in servers.items():
        verdict = verify(headers, body, keys=server_keys, now=now, tolerance=tolerance)
        if isinstance(verdict, Verified):
            return server, verdict
        refused = refused or verdict
    assert refused is not None
    return refused


# Resuming -------------------------------------------------------------------------------------------------------


class AccountEvent(Protocol):
    """What the in-process subscription yields (the connected accounts' events): its type and whose account."""

    @property
    def type(self) -> str: ...

    @property
    def principal(self) -> str: ...

    @property
    def connection(self) -> str: ...

    @property
    def label(self) -> str: ...


async def resume_for(runtime: Runtime, event: AccountActive) -> list[Outcome]:
    """Send back every call waiting for exactly `event`'s account (`Runtime.account_active`). Safe to repeat, and to
    run in two processes at once: a call's round is sent once (its resume is claimed in the store), a finished call
    is not parked any more, and a call whose account is still not connected waits again with the server's link.
    `ResumeDueError` (after every call was tried) when some could not go on."""
    return await runtime.account_active(event)


async def resume_on_account_events(
    runtime: Runtime, events: AsyncIterable[AccountEvent], *, server: str | None = None
) -> None:
    """Resume the calls to `server` (its MCP URL, as the calls are made to it) waiting for exactly an account
    whenever `events` (that server's connected accounts' `events()`, when runtime and server share a process) says
    it became ACTIVE, until `events` ends. A resume that fails is logged and the next event is taken: the call stays
    parked for the next event, or for `askback inbox resume`.

    Without `server` (deprecated, `DeprecationWarning`; pass it): the events speak for the one server the parked
    calls go to, or for any server while they go to several, said once in the log."""
    unnamed: UnnamedServer | None = None
    if server is None:
        warnings.warn(_SUBSCRIPTION_WITHOUT_SERVER, DeprecationWarning, stacklevel=2)
        unnamed = UnnamedServer(runtime, form="resume_on_account_events without server=", instead="pass server=URL")
    async for event in events:
        if event.type not in RESUMING_EVENTS:
            continue
        try:
            bound = server if unnamed is None else await unnamed.server()
            await resume_for(runtime, AccountActive(event.principal, event.connection, event.label, bound))
        except AskbackError:
            log.warning("resuming on %s for %s/%s failed", event.type, event.principal, event.connection, exc_info=True)


_SUBSCRIPTION_WITHOUT_SERVER = (
    "resume_on_account_events(runtime, events) without server= is deprecated: pass server= the MCP URL the events' "
    "server is called at, so that its events resume only calls to it"
)
_SECRETS_WITHOUT_SERVERS = (
    "webhook_receiver(runtime, secrets=[...]) is deprecated: pass servers={MCP URL: [secrets]}, each server's URL "
    "with the secrets its endpoint signs with, so that an event resumes only calls to the server that signed it"
)


# The table of webhooks taken in ----------------------------------------------------------------------------------

_WEBHOOKS = cast(Table, WebhookRow.__table__)
_w = _WEBHOOKS.c
_TAKE_NEW = {
    "sqlite": sqlite_insert(_WEBHOOKS).on_conflict_do_nothing(index_elements=["id"]),
    "postgresql": pg_insert(_WEBHOOKS).on_conflict_do_nothing(index_elements=["id"]),
}
_TAKE_OVER = (
    update(_WEBHOOKS)
    .where(_w.id == bindparam("b_id"), _w.done_at.is_(None), _w.claimed_until < bindparam("b_now"))
    .values(claim=bindparam("b_claim"), claimed_until=bindparam("b_until"))
)
_GIVE_BACK = delete(_WEBHOOKS).where(_w.id == bindparam("b_id"), _w.claim == bindparam("b_claim"))
_DONE = (
    update(_WEBHOOKS)
    .where(_w.id == bindparam("b_id"), _w.claim == bindparam("b_claim"))
    .values(claim=None, claimed_until=None, done_at=bindparam("b_at"))
)


def dedupe_key(server: str, webhook_id: str) -> str:
    """The key a webhook is claimed under: the server its signature proves and its `webhook-id`, as one digest that
    fits the table's id column whatever their length. Rows taken before servers had keys of their own hold the bare
    id and are never matched again: a redelivery of one is looked at once more, which a resume allows."""
    digest = hashlib.sha256(f"{len(server)}:{server}\n{webhook_id}".encode()).hexdigest()
    return f"s1_{digest}"


async def _take(runtime: Runtime, webhook_id: str, type_: str, *, now: float, lease: float) -> str | None:
    """Claim the webhook `webhook_id`: a claim token, or None when it was acted on, or is being acted on elsewhere."""
    claim = _random.token_urlsafe(12)

    def write(conn: Connection) -> bool:
        row = {"id": webhook_id, "type": type_[:64], "received_at": now, "claim": claim, "claimed_until": now + lease}
        if conn.execute(_TAKE_NEW[conn.dialect.name], row).rowcount == 1:
            return True
        # Taken before by a process that stopped half-way (its lease ran out): this one takes over.
        params = {"b_id": webhook_id, "b_now": now, "b_claim": claim, "b_until": now + lease}
        return bool(conn.execute(_TAKE_OVER, params).rowcount == 1)

    won = await runtime.store.database.transaction(write, doing="take in a webhook", immediate=True)
    return claim if won else None


# The receiver ---------------------------------------------------------------------------------------------------


def _json(status: int, **body: Any) -> Response:
    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _outcome_json(outcome: Outcome) -> dict[str, Any]:
    status = "completed" if isinstance(outcome, Completed) else "claimed" if isinstance(outcome, Claimed) else "parked"
    return {"call_id": outcome.call_id, "status": status}


class _Receiver:
    """The receiver over one runtime: verify, claim the webhook id, resume, answer."""

    def __init__(
        self,
        runtime: Runtime,
        servers: dict[str, tuple[bytes, ...]],
        tolerance: float,
        clock: Clock,
        timeout: float,
        unnamed: UnnamedServer | None,
    ) -> None:
        self.runtime = runtime
        self.servers = servers
        # Secrets given without their server (deprecated): `servers` holds them under "", bound at the first event.
        self.unnamed = unnamed
        self.tolerance = tolerance
        self.clock = clock
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        response = await self.answer(request)
        await response(scope, receive, send)

    async def answer(self, request: Request) -> Response:
        if request.method != "POST":
            return Response(status_code=405, headers={"Allow": "POST"})
        try:
            body = await request.body()
        except HTTPException as exc:
            return _json(exc.status_code, reason="the body is too large")
        found = signed_by(request.headers, body, servers=self.servers, now=self.clock.now(), tolerance=self.tolerance)
        if isinstance(found, Refused):
            log.info("webhook refused: %s", found.reason)
            return _json(401, reason=found.reason)
        server, verdict = found
        event = account_event(body)
        if isinstance(event, Ignored):
            return Response(status_code=204)
        if isinstance(event, Unreadable):
            return _json(400, reason=event.reason)
        # The event speaks for the server whose secret signed it, and for no other; so does its id.
        ready = AccountReady(event.type, replace(event.account, server=server))
        return await self.resume(server, verdict.webhook_id, ready)

    async def resume(self, server: str, webhook_id: str, event: AccountReady) -> Response:
        runtime = self.runtime
        key = dedupe_key(server, webhook_id)
        claim = await _take(runtime, key, event.type, now=self.clock.now(), lease=2 * self.timeout)
        if claim is None:
            return _json(200, duplicate=True, calls=[])
        failed: dict[str, CallError] = {}
        try:
            with anyio.fail_after(self.timeout):
                account = event.account
                if self.unnamed is not None:  # secrets without their server: the server they are bound to
                    account = replace(account, server=await self.unnamed.server())
                try:
                    if isinstance(account, ApprovalDecided):
                        outcomes = await runtime.approval_decided(account)
                    else:
                        outcomes = await resume_for(runtime, account)
                except ResumeDueError as exc:
                    if not exc.outcomes:
                        raise  # no call went on: the sender's retry is every call's next chance
                    outcomes, failed = list(exc.outcomes), exc.errors
        except (AskbackError, TimeoutError) as exc:
            why = "the resume did not finish in time" if isinstance(exc, TimeoutError) else "the resume failed"
            # One line, no traceback: what a server said is its own text, and the log's formatter escapes it.
            log.warning("webhook %s: %s: %s", webhook_id, why, "no answer" if isinstance(exc, TimeoutError) else exc)
            await self.give_back(key, claim)
            return _json(503, reason=f"{why}; send it again")
        except BaseException:
            await self.give_back(key, claim)
            raise
        not_resumed: list[dict[str, Any]] = []
        for call_id, error in failed.items():
            # Taken: the calls that went on must not be sent again. One the server refused for good (its round
            # answered with an error) has ended failed; any other waits as it was, for its own retry.
            ended = (await runtime.calls.get(call_id)).status == CallStatus.FAILED
            status = "failed" if ended else "not_resumed"
            how = "ended failed" if ended else "could not go on and waits as it was"
            log.warning("webhook %s: call %s %s: %s", webhook_id, call_id, how, error)
            not_resumed.append({"call_id": call_id, "status": status})
        params = {"b_id": key, "b_claim": claim, "b_at": self.clock.now()}
        await runtime.store.database.transaction(lambda conn: conn.execute(_DONE, params), doing="record a webhook")
        calls = [_outcome_json(o) for o in outcomes] + not_resumed
        return _json(200, duplicate=False, calls=calls)

    async def give_back(self, webhook_id: str, claim: str) -> None:
        with anyio.CancelScope(shield=True):
            await self.runtime.store.database.transaction(
                lambda conn: conn.execute(_GIVE_BACK, {"b_id": webhook_id, "b_claim": claim}),
                doing="give back a webhook",
            )


def _server_keys(servers: Mapping[str, Sequence[str]]) -> dict[str, tuple[bytes, ...]]:
    if not servers:
        raise ConfigurationError("the webhook receiver needs the servers it takes events from, each with its secrets")
    found = {server: keys(secrets) for server, secrets in servers.items()}
    owners: dict[bytes, str] = {}
    for server, server_keys in found.items():
        for key in server_keys:
            if owners.setdefault(key, server) != server:
                raise ConfigurationError(
                    f"two servers ({owners[key]} and {server}) are given one webhook secret: give each server's "
                    "endpoint a secret of its own, so that an event says which server sent it"
                )
    return found


def webhook_receiver(
    runtime: Runtime,
    *,
    servers: Mapping[str, Sequence[str]] | None = None,
    secrets: Sequence[str] | None = None,
    tolerance: float = 300,
    clock: Clock | None = None,
    resume_timeout: float = 10.0,
    max_body: int = _MAX_BODY,
    hosts: Sequence[str] = (),
) -> ASGIApp:
    """An ASGI app taking Standard Webhooks POSTs for `runtime` from `servers` (each server's MCP URL, as the calls
    are made to it, with the `whsec_...` secrets its endpoint signs with): `account.connected` and
    `account.recovered` send back the calls to the server that signed it waiting for exactly that account, and
    `approval.decided` those waiting on exactly that approval request (200, with each call's status), other events are ignored (204), a repeat of a webhook id does nothing again (200,
    `duplicate`). Refused: a signature no configured secret made, or a timestamp more than `tolerance` seconds from
    now (401); a body over `max_body` bytes (413); a signed body that is not an event (400). A resume that fails or
    takes over `resume_timeout` seconds answers 503, for the sender to retry. `clock` defaults to the runtime's. A
    secret that is not `whsec_<base64>`, no server, or one secret given to two servers is `ConfigurationError`.
    A request for a host other than the loopback names, the runtime's configured ones (`ASKBACK_ALLOWED_HOSTS`,
    `ASKBACK_PUBLIC_URL`'s) and `hosts` is refused (421) before anything is read (`askback.web.asgi.HostGuard`).

    `secrets` (deprecated, `DeprecationWarning`; pass `servers`) are secrets without their server: their events
    speak for the one server the parked calls go to, or for any server while they go to several, said once in the
    log. Both `servers` and `secrets` is `ConfigurationError`."""
    unnamed: UnnamedServer | None = None
    if secrets is not None:
        if servers is not None:
            raise ConfigurationError(
                "webhook_receiver takes servers= or the deprecated secrets=, not both: give every secret under its "
                "server's MCP URL in servers="
            )
        warnings.warn(_SECRETS_WITHOUT_SERVERS, DeprecationWarning, stacklevel=2)
        instead = "servers={MCP URL: [secrets]}, or --webhook-secret-env URL=VAR"
        unnamed = UnnamedServer(runtime, form="webhook secrets given without their server", instead=instead)
        servers = {"": secrets}
    found = _server_keys(servers or {})
    receiver = _Receiver(runtime, found, tolerance, clock or runtime.clock, resume_timeout, unnamed)
    allowed = AllowedHosts.configured(runtime.settings, hosts)
    return SecurityHeaders(HostGuard(CappedBody(receiver, limit=max_body), allowed=allowed), headers=API_HEADERS)
