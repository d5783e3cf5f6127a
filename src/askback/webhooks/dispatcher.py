"""The dispatcher: one loop per instance that turns new events into deliveries and delivers what is due.

Each pass (`run_once`) first reads, for every endpoint, the events after its cursor (the shared event log for the
account family, the audit log for the opt-in audit family) and queues them (`Outbox.enqueue`); then it claims the
due deliveries with a lease, POSTs each one signed (`signing`), and records the attempt: a 2xx answer delivers it,
anything else (another status, a redirect, a timeout, no connection) schedules the next try (`RetrySchedule`) or,
once the schedule ran out, fails it. Between passes it waits for a new event (`Store.wait_for_events`), for the next
delivery to fall due on the injected clock, or for `idle` seconds, whichever comes first: never a busy loop.

Any number of instances run this loop on one database: the outbox's conditional writes decide who queues and who
sends, and a delivery whose instance died mid-attempt is sent again once its lease ends, with the same `webhook-id`.
"""

from __future__ import annotations

import logging
import random
import secrets
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
import httpx

from askback.clock import Clock, SystemClock
from askback.errors import AskbackError
from askback.store import Store
from askback.webhooks._guard import Resolve, guarded_transport, origin
from askback.webhooks.endpoints import Endpoint
from askback.webhooks.outbox import Attempt, Claimed, DeliveryStatus, Outbox, Source
from askback.webhooks.schedule import RetryAt, RetrySchedule
from askback.webhooks.signing import message_body, signed_headers

__all__ = ["Dispatcher", "SentTest", "send_test"]

logger = logging.getLogger("askback.webhooks")

# Standard Webhooks' advice: a receiver answers quickly and does its work later.
TIMEOUT = 10.0
_BATCH = 500
_CLAIM = 32
_IN_FLIGHT = 8


def _http_client(timeout: float, endpoints: Sequence[Endpoint], resolve: Resolve | None = None) -> httpx.AsyncClient:
    """The one client webhooks are sent with: it connects only where `_destinations` allows (the private
    destinations of `endpoints` that say `allow_private` besides), resolving names with `resolve` (the system's by
    default), and ignores the environment's proxies, which would connect on its behalf where it cannot check."""
    allowed = [origin(endpoint.url) for endpoint in endpoints if endpoint.allow_private]
    transport = guarded_transport(allowed, resolve=resolve)
    return httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False, transport=transport)


async def _post(http: httpx.AsyncClient, url: str, headers: dict[str, str], body: str) -> tuple[int | None, str | None]:
    """POST `body`: the HTTP status, or `None` and the kind of failure. What the receiver answered is not kept."""
    try:
        response = await http.post(url, content=body.encode(), headers=headers)
    except httpx.TimeoutException:
        return None, "timeout"
    except httpx.ConnectError:
        return None, "connect"
    except httpx.HTTPError as exc:
        return None, type(exc).__name__
    return response.status_code, None


class Dispatcher:
    """Deliveries of `endpoints`' events from `store`, signed with their secrets; see the module's docstring.

    `clock` and `rng` decide when retries fall due (inject them to control time and jitter); `lease` is how long an
    attempt holds its delivery (longer than `timeout`); `idle` the longest wait between passes (the audit log, which
    wakes no one, is read at least that often)."""

    def __init__(
        self,
        store: Store,
        endpoints: Sequence[Endpoint],
        *,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        schedule: RetrySchedule | None = None,
        http: httpx.AsyncClient | None = None,
        timeout: float = TIMEOUT,
        lease: float = 60.0,
        idle: float = 1.0,
        instance: str | None = None,
    ) -> None:
        self.store = store
        self.outbox = Outbox(store)
        self.endpoints = tuple(endpoints)
        self.clock: Clock = clock or SystemClock()
        self.rng = rng or random.Random()
        self.schedule = schedule or RetrySchedule()
        self.lease = lease
        self.idle = idle
        self.instance = instance or f"{socket.gethostname()[:40]}:{secrets.token_hex(4)}"
        self._own_http = http is None
        self._http = http or _http_client(timeout, self.endpoints)
        self._by_key = {endpoint.key: endpoint for endpoint in self.endpoints}
        # The lowest event cursor the last `collect` left: a newer event wakes `wait`.
        self._seen: int | None = None

    def _sources(self) -> list[tuple[Endpoint, Source]]:
        found: list[tuple[Endpoint, Source]] = []
        for endpoint in self.endpoints:
            if endpoint.wants_account_events:
                found.append((endpoint, "events"))
            if endpoint.wants_audit_events:
                found.append((endpoint, "audit"))
        return found

    async def prepare(self) -> None:
        """Give each endpoint its cursors (at the newest event, for an endpoint seen for the first time)."""
        latest: dict[Source, int] = {}
        for endpoint, source in self._sources():
            if source not in latest:
                latest[source] = await self.outbox.latest(source)
            await self.outbox.start_cursor(endpoint, source, latest[source])

    async def collect(self) -> int:
        """Queue every event after each endpoint's cursor; the number of deliveries added."""
        added = 0
        seen: list[int] = []
        for endpoint, source in self._sources():
            while True:
                cursor = await self.outbox.cursor(endpoint, source)
                if cursor is None:
                    await self.outbox.start_cursor(endpoint, source, await self.outbox.latest(source))
                    break
                events = await self.outbox.events_after(source, cursor, _BATCH)
                queued = await self.outbox.enqueue(endpoint, source, cursor, events, now=self.clock.now())
                added += queued or 0
                if len(events) < _BATCH:
                    if source == "events":
                        seen.append(events[-1].id if events and queued is not None else cursor)
                    break
        self._seen = min(seen) if seen else None
        return added

    async def deliver_due(self) -> int:
        """Attempt every delivery due now; the number of attempts made."""
        made = 0
        limiter = anyio.CapacityLimiter(_IN_FLIGHT)
        while True:
            now = self.clock.now()
            claimed = await self.outbox.claim(now=now, until=now + self.lease, by=self.instance, limit=_CLAIM)
            if not claimed:
                return made

            async def attempt(delivery: Claimed) -> None:
                async with limiter:
                    await self._attempt(delivery)

            async with anyio.create_task_group() as tasks:
                for delivery in claimed:
                    tasks.start_soon(attempt, delivery)
            made += len(claimed)

    async def _attempt(self, delivery: Claimed) -> None:
        endpoint = self._by_key.get(delivery.endpoint)
        number = delivery.attempts + 1
        at = self.clock.now()
        started = time.perf_counter()
        status: int | None = None
        error: str | None = "unconfigured"  # queued for an endpoint no longer configured here: no secret to sign with
        if endpoint is not None:
            headers = signed_headers(endpoint.keys, delivery.webhook_id, int(at), delivery.body)
            status, error = await _post(self._http, endpoint.url, headers, delivery.body)
        attempt = Attempt(delivery.id, number, at, time.perf_counter() - started, status, error)
        now = self.clock.now()
        outcome: DeliveryStatus
        if status is not None and 200 <= status < 300:
            outcome, next_at = "delivered", now
        else:
            decision = self.schedule.after_failure(number, now, self.rng)
            outcome, next_at = ("pending", decision.at) if isinstance(decision, RetryAt) else ("failed", now)
        kept = await self.outbox.settle(delivery, attempt, by=self.instance, status=outcome, next_attempt_at=next_at)
        logger.info(
            "askback webhook %s attempt %d to %s: %s -> %s",
            delivery.webhook_id,
            number,
            delivery.url,
            status if status is not None else error,
            outcome if kept else "lease lost",
        )

    async def run_once(self) -> int:
        """One pass: queue new events, then attempt what is due. The number of deliveries queued and attempted."""
        return await self.collect() + await self.deliver_due()

    async def wait(self) -> None:
        """Wait for a new event, the next due delivery on the clock, or `idle` seconds, whichever comes first."""
        seen = self._seen if self._seen is not None else await self.store.latest_event_id()
        due = await self.outbox.next_due()
        wake_at = self.clock.now() + self.idle if due is None else min(due, self.clock.now() + self.idle)
        async with anyio.create_task_group() as tasks:

            async def events() -> None:
                await self.store.wait_for_events(seen, timeout=self.idle)
                tasks.cancel_scope.cancel()

            async def clock() -> None:
                await self.clock.sleep_until(wake_at)
                tasks.cancel_scope.cancel()

            tasks.start_soon(events)
            tasks.start_soon(clock)

    async def run(self) -> None:
        """Pass and wait until cancelled. A database that cannot be reached is logged and tried again."""
        await self.prepare()
        while True:
            try:
                await self.run_once()
            except AskbackError as exc:
                logger.warning("askback webhooks: %s (trying again in %s s)", exc, self.idle)
                await anyio.sleep(self.idle)
                continue
            try:
                await self.wait()
            except AskbackError as exc:
                logger.warning("askback webhooks: %s (trying again in %s s)", exc, self.idle)
                await anyio.sleep(self.idle)

    async def aclose(self) -> None:
        if self._own_http:
            await self._http.aclose()


@dataclass(frozen=True)
class SentTest:
    """What `send_test` got: the receiver's HTTP status, or the kind of failure; and the message's id."""

    webhook_id: str
    status: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


async def send_test(
    endpoint: Endpoint, *, clock: Clock | None = None, http: httpx.AsyncClient | None = None
) -> SentTest:
    """Send `endpoint` one signed `webhook.test` message now (not through the outbox, whatever it subscribes to)."""
    at = (clock or SystemClock()).now()
    msg_id = f"msg_test{secrets.token_hex(6)}_{endpoint.key}"
    body = message_body("webhook.test", at, {"url": endpoint.url})
    client = http or _http_client(TIMEOUT, (endpoint,))
    try:
        status, error = await _post(client, endpoint.url, signed_headers(endpoint.keys, msg_id, int(at), body), body)
    finally:
        if http is None:
            await client.aclose()
    return SentTest(msg_id, status, error)
